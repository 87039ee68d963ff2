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

inline uint16_t FloatToFp16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7E00;
  float magnitude = RoundToFormat(std::fabs(f), 10, -14);
  if (magnitude >= 65520.0f) return sign | 0x7C00;  // overflows to infinity
  if (magnitude < std::ldexp(1.0f, -14)) return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
  int exponent;
  const float m = std::frexp(magnitude, &exponent);  // [0.5, 1)
  const uint16_t mantissa = static_cast<uint16_t>(std::nearbyint((m * 2.0f - 1.0f) * 1024.0f));
  return sign | static_cast<uint16_t>((exponent - 1 + 15) << 10) | mantissa;
}

inline float Fp8E4m3ToFloat(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exponent = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
}

constexpr float kFp8E4m3Max = 448.0f;

inline uint8_t FloatToFp8E4m3(float f) {
  if (std::isnan(f)) return 0x7F;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float magnitude = RoundToFormat(std::fabs(f), 3, -6);
  if (magnitude >= kFp8E4m3Max) return sign | 0x7E;  // saturate to 448
  if (magnitude < std::ldexp(1.0f, -6)) return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(magnitude, 9)));
  int exponent;
  const float m = std::frexp(magnitude, &exponent);
  const uint8_t mantissa = static_cast<uint8_t>(std::nearbyint((m * 2.0f - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>((exponent - 1 + 7) << 3) | mantissa;
}

// e4m3fnuz (MI300's fp8, torch.float8_e4m3fnuz): bias 8 instead of 7, 0x80 is the only NaN (there
// is no -0), and S.1111.111 is a number (+-240), not NaN. Decoding it as e4m3fn would halve every
// value and turn +-240 into NaN.
inline float Fp8E4m3FnuzToFloat(uint8_t v) {
  if (v == 0x80) return std::nanf("");
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int exponent = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -10);
  return sign * std::ldexp(1.0f + mantissa / 8.0f, exponent - 8);
}

constexpr float kFp8E4m3FnuzMax = 240.0f;

// Round to nearest even, saturating to +-240 like the e4m3fn path saturates to +-448. A value that
// rounds to zero is 0x00 whatever its sign: 0x80 would be NaN.
inline uint8_t FloatToFp8E4m3Fnuz(float f) {
  if (std::isnan(f)) return 0x80;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float magnitude = RoundToFormat(std::fabs(f), 3, -7);
  if (magnitude >= kFp8E4m3FnuzMax) return sign | 0x7F;
  if (magnitude == 0.0f) return 0x00;
  if (magnitude < std::ldexp(1.0f, -7)) return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(magnitude, 10)));
  int exponent;
  const float m = std::frexp(magnitude, &exponent);
  const uint8_t mantissa = static_cast<uint8_t>(std::nearbyint((m * 2.0f - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>((exponent - 1 + 8) << 3) | mantissa;
}

}  // namespace mori::ep::cpu
