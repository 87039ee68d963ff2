// SPDX-License-Identifier: MIT
// Element conversions of the cpu backend, bit-exact with the CUDA intrinsics the cuda backend
// uses (round to nearest even; fp8 e4m3fn saturates to +-448 like __nv_cvt_float_to_fp8 with
// __NV_SATFINITE), so both backends produce the same combine results.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace mori::ep::cpu {

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint32_t FloatToBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

inline float Bf16ToFloat(uint16_t v) { return BitsToFloat(static_cast<uint32_t>(v) << 16); }

inline uint16_t FloatToBf16(float f) {
  const uint32_t bits = FloatToBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((bits >> 16) | 0x40);  // keep it a (quiet) NaN
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float Fp16ToFloat(uint16_t v) {
  const uint32_t sign = (v & 0x8000u) << 16;
  const uint32_t exponent = (v >> 10) & 0x1F;
  const uint32_t mantissa = v & 0x3FF;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  return BitsToFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even of |f| to a value with `mantissa_bits` bits after the point and no
// exponent below `min_exp`; returns the rounded magnitude as a float.
inline float RoundToFormat(float magnitude, int mantissa_bits, int min_exp) {
  if (magnitude == 0.0f) return 0.0f;
  int exponent;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
  exponent -= 1;                     // now magnitude = 1.x * 2^exponent
  if (exponent < min_exp) exponent = min_exp;
  const float quantum = std::ldexp(1.0f, exponent - mantissa_bits);
  return std::nearbyint(magnitude / quantum) * quantum;  // nearbyint: ties to even in the default mode
}

// The bits (no sign) of a magnitude that RoundToFormat already rounded to a format with
// `mantissa_bits` mantissa bits and exponent `bias`, and that is finite in it: a subnormal below
// 2^(1 - bias), else the biased exponent above the mantissa. Every float-to-narrow conversion
// here ends with it.
template <typename Bits>
inline Bits EncodeRounded(float magnitude, int mantissa_bits, int bias) {
  const int min_exp = 1 - bias;
  if (magnitude < std::ldexp(1.0f, min_exp)) {
    return static_cast<Bits>(std::nearbyint(std::ldexp(magnitude, mantissa_bits - min_exp)));
  }
  int exponent;
  const float m = std::frexp(magnitude, &exponent);  // [0.5, 1)
  const Bits mantissa = static_cast<Bits>(std::nearbyint((m * 2.0f - 1.0f) * std::ldexp(1.0f, mantissa_bits)));
  return static_cast<Bits>(((exponent - 1 + bias) << mantissa_bits) | mantissa);
}

// The value of a finite fp8 e4m3 (fn or fnuz, by `bias`) from its bits: a subnormal when the
// exponent field is 0.
inline float DecodeFp8E4m3(uint8_t v, int bias) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exponent = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), 1 - bias - 3);
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - bias);
}

inline uint16_t FloatToFp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7E00;
  float magnitude = RoundToFormat(std::fabs(f), 10, -14);
  if (magnitude >= 65520.0f) return sign | 0x7C00;  // overflows to infinity
  return sign | EncodeRounded<uint16_t>(magnitude, 10, 15);
}

// The two fp8 e4m3 formats differ only in these. e4m3fnuz (MI300's fp8, torch.float8_e4m3fnuz):
// bias 8 instead of 7, 0x80 is the only NaN (there is no -0), and S.1111.111 is a number (+-240),
// not NaN; decoding it as e4m3fn would halve every value and turn +-240 into NaN.
struct Fp8E4m3Format {
  int bias;
  uint8_t nan;        // what a NaN encodes to
  float max;          // the largest finite magnitude, which larger ones saturate to
  uint8_t saturated;  // its bits, without the sign
  bool signed_zero;   // false: a value that rounds to zero is 0x00 whatever its sign (0x80 is fnuz's NaN)
};

constexpr float kFp8E4m3Max = 448.0f;
constexpr float kFp8E4m3FnuzMax = 240.0f;
constexpr Fp8E4m3Format kFp8E4m3Fn{7, 0x7F, kFp8E4m3Max, 0x7E, true};
constexpr Fp8E4m3Format kFp8E4m3Fnuz{8, 0x80, kFp8E4m3FnuzMax, 0x7F, false};

// Round to nearest even, saturating to +-max (like __nv_cvt_float_to_fp8 with __NV_SATFINITE).
inline uint8_t FloatToFp8(float f, const Fp8E4m3Format& format) {
  if (std::isnan(f)) return format.nan;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float magnitude = RoundToFormat(std::fabs(f), 3, 1 - format.bias);
  if (magnitude >= format.max) return sign | format.saturated;
  if (magnitude == 0.0f && !format.signed_zero) return 0x00;
  return sign | EncodeRounded<uint8_t>(magnitude, 3, format.bias);
}

inline float Fp8E4m3ToFloat(uint8_t v) {
  if ((v & 0x7F) == 0x7F) return std::nanf("");  // S.1111.111
  return DecodeFp8E4m3(v, kFp8E4m3Fn.bias);
}

inline uint8_t FloatToFp8E4m3(float f) { return FloatToFp8(f, kFp8E4m3Fn); }

inline float Fp8E4m3FnuzToFloat(uint8_t v) {
  if (v == kFp8E4m3Fnuz.nan) return std::nanf("");
  return DecodeFp8E4m3(v, kFp8E4m3Fnuz.bias);
}

inline uint8_t FloatToFp8E4m3Fnuz(float f) { return FloatToFp8(f, kFp8E4m3Fnuz); }

}  // namespace mori::ep::cpu
