// SPDX-License-Identifier: MIT
// e2m1 (FP4) conversions of MORI's fp4_blockwise combine wire format, in software (Hopper has no
// FP4 conversion instructions) and element for element what the cpu backend computes
// (src/cpu/fp4.hpp): round to nearest even, saturate at 6, a nibble is sign << 3 | code with code
// indexing {0, 0.5, 1, 1.5, 2, 3, 4, 6}; a packed byte holds element 2i in its low nibble.
// The block scale is amax / 6 (IEEE division: the JIT compiles without fast math), 1 for an
// all-zero block.
#pragma once

namespace mori::ep {

constexpr float kE2m1Max = 6.0f;

__device__ __forceinline__ unsigned FloatToE2m1(float v) {
  const float m = fabsf(v);
  // Ties go to the even code: down at 0.25, 1.25, 2.5, 5; up at 0.75, 1.75, 3.5.
  const unsigned code = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) + (m > 5.0f);
  return code | (v < 0.0f ? 8u : 0u);
}

__device__ __forceinline__ float E2m1ToFloat(unsigned nibble) {
  const unsigned code = nibble & 7u;
  // Codes 2..7 are (1 + m/2) * 2^(e-1) with e = code >> 1, m = code & 1: built as fp32 bits.
  const float magnitude = code < 2u ? 0.5f * static_cast<float>(code)
                                    : __int_as_float(static_cast<int>((((code >> 1) + 126u) << 23) | ((code & 1u) << 22)));
  return (nibble & 8u) ? -magnitude : magnitude;
}

__device__ __forceinline__ float Fp4BlockScale(float amax) { return amax > 0.0f ? amax / kE2m1Max : 1.0f; }

// Eight floats / scale as eight packed e2m1 nibbles (one 32-bit word, element 0 lowest).
__device__ __forceinline__ unsigned FloatsToE2m1x8(const float (&f)[8], float scale) {
  unsigned word = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) word |= FloatToE2m1(fminf(fmaxf(f[i] / scale, -kE2m1Max), kE2m1Max)) << (4 * i);
  return word;
}

}  // namespace mori::ep
