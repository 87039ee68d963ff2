// SPDX-License-Identifier: MIT
// MORI's fp4_blockwise combine wire format on the cpu backend, element for element what the
// kernels compute (src/device/ep_fp4.cuh): a row of H values travels as H/2 bytes of packed e2m1
// (element 2i in the low nibble of byte i) plus one fp32 scale per block of H / quant_blocks
// values, scale = amax / 6 (1 for an all-zero block). e2m1 rounds to nearest even and saturates
// at 6; a nibble is sign << 3 | code, code indexing {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mori::ep::cpu {

constexpr float kE2m1Max = 6.0f;

inline uint8_t FloatToE2m1(float v) {
  const float m = std::fabs(v);
  // Ties go to the even code: down at 0.25, 1.25, 2.5, 5; up at 0.75, 1.75, 3.5.
  const uint8_t code = static_cast<uint8_t>((m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) +
                                            (m >= 3.5f) + (m > 5.0f));
  return static_cast<uint8_t>(code | (v < 0.0f ? 8 : 0));
}

inline float E2m1ToFloat(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kValues[nibble & 7];
  return (nibble & 8) ? -m : m;
}

inline float Fp4BlockScale(float amax) { return amax > 0.0f ? amax / kE2m1Max : 1.0f; }

// `row` (H fp32 values) into H/2 packed bytes and quant_blocks scales.
inline void QuantizeFp4Blockwise(const float* row, int hidden, int quant_blocks, uint8_t* out, float* scales) {
  const int block = hidden / quant_blocks;
  for (int b = 0; b < quant_blocks; ++b) {
    float amax = 0.0f;
    for (int i = b * block; i < (b + 1) * block; ++i) amax = std::max(amax, std::fabs(row[i]));
    const float scale = Fp4BlockScale(amax);
    scales[b] = scale;
    for (int i = b * block; i < (b + 1) * block; i += 2) {
      const uint8_t lo = FloatToE2m1(std::min(std::max(row[i] / scale, -kE2m1Max), kE2m1Max));
      const uint8_t hi = FloatToE2m1(std::min(std::max(row[i + 1] / scale, -kE2m1Max), kE2m1Max));
      out[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

// Element i of a packed row with its block scales.
inline float DequantizeFp4Blockwise(const uint8_t* row, const float* scales, int hidden, int quant_blocks, int i) {
  const uint8_t byte = row[i / 2];
  return E2m1ToFloat((i & 1) ? byte >> 4 : byte & 0xF) * scales[i / (hidden / quant_blocks)];
}

}  // namespace mori::ep::cpu
