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

// Round to nearest even from the float's bits, in a few integer steps rather than a compare per
// code (the staging of every combined row runs this per element, and the compare chain made the
// fp4_blockwise combine compute-bound). Below 1 the codes are 0, 0.5 and 1: rint(2m). From 1 up, e2m1
// keeps one mantissa bit, so rounding fp32's 23 to 1 (carry into the exponent included) gives
// the code as exponent * 2 + mantissa, offset by the exponents' bias difference. Equal to the
// compare chain {> 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5} for every fp32 in [-6, 6]
// (checked exhaustively when this was written); callers clamp to +-6 first.
__device__ __forceinline__ unsigned FloatToE2m1(float v) {
  const unsigned magnitude = __float_as_uint(v) & 0x7FFFFFFFu;
  const unsigned code = magnitude < 0x3F800000u ? static_cast<unsigned>(__float2int_rn(2.0f * __uint_as_float(magnitude)))
                                                : ((magnitude + 0x1FFFFFu + ((magnitude >> 22) & 1u)) >> 22) - 252u;
  return code | (v < 0.0f ? 8u : 0u);  // -0 encodes as +0, as the cpu backend's does
}

// The nibble's exponent and mantissa bits placed where fp32's go, times 2^126 (the bias
// difference, exact): code 1 lands on an fp32 subnormal, which the JIT keeps (no flush to zero).
__device__ __forceinline__ float E2m1ToFloat(unsigned nibble) {
  return __uint_as_float(((nibble & 8u) << 28) | ((nibble & 7u) << 22)) * 0x1p126f;
}

__device__ __forceinline__ float Fp4BlockScale(float amax) { return amax > 0.0f ? amax / kE2m1Max : 1.0f; }

// Eight quotients (values / their block's scale) as eight packed e2m1 nibbles (one 32-bit word,
// element 0 lowest), saturated at +-6.
__device__ __forceinline__ unsigned PackE2m1x8(const float (&q)[8]) {
  unsigned word = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) word |= FloatToE2m1(fminf(fmaxf(q[i], -kE2m1Max), kE2m1Max)) << (4 * i);
  return word;
}

}  // namespace mori::ep
