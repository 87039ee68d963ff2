// SPDX-License-Identifier: MIT
// Element conversions of the cpu backend, all round-to-nearest-even like the GPU's intrinsics:
// bfloat16 and float16 storage, and the fp8 wire format (OCP e4m3fn, finite max 448).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace mori::cco::host {

inline uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

inline float float_of(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

inline float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t x = bits_of(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return float_of(sign | 0x7F800000u | (mantissa << 13));
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude >= 0x7F800000u) return sign | (magnitude > 0x7F800000u ? 0x7E00 : 0x7C00);
  if (magnitude >= 0x477FF000u) return sign | 0x7C00;  // 65520 and up round to infinity
  if (magnitude < 0x38800000u) {                        // below 2^-14: a subnormal half, unit 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(float_of(magnitude) * 16777216.0f));
  }
  uint32_t h = ((((magnitude >> 23) - 112u) << 10) | ((magnitude & 0x7FFFFFu) >> 13));
  const uint32_t rest = magnitude & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

constexpr float kFp8Max = 448.0f;

// e4m3fn: bias 7, no infinities, 0x7F/0xFF are NaN. Saturates to +-448. Normal values round
// on the float's bits (drop 20 mantissa bits, nearest even), which keeps quantisation cheap.
inline uint8_t float_to_fp8(float f) {
  const uint32_t x = bits_of(f);
  const uint8_t sign = (x >> 24) & 0x80;
  const uint32_t magnitude = x & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;
  if (magnitude >= 0x43E00000u) return sign | 0x7E;  // 448 and up
  if (magnitude >= 0x3C800000u) {                     // 2^-6 and up: normal
    const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
    const uint32_t code = (rounded >> 20) - (120u << 3);  // rebias the exponent from 127 to 7
    return sign | static_cast<uint8_t>(code > 0x7Eu ? 0x7Eu : code);
  }
  // Subnormal: unit 2^-9 (a result of 8 is 2^-6, the smallest normal, also right).
  return sign | static_cast<uint8_t>(std::nearbyint(float_of(magnitude) * 512.0f));
}

inline float fp8_to_float(uint8_t code) {
  static const auto table = [] {
    std::array<float, 256> values{};
    for (int c = 0; c < 256; ++c) {
      const int exponent = (c >> 3) & 0xF;
      const int mantissa = c & 0x7;
      float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                      : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
      if (exponent == 0xF && mantissa == 0x7) magnitude = std::nanf("");
      values[c] = (c & 0x80) != 0 ? -magnitude : magnitude;
    }
    return values;
  }();
  return table[code];
}

}  // namespace mori::cco::host
