// SPDX-License-Identifier: MIT
// Element conversions the device code of mori-shmem's users shares (mori-ep's combine, mori-cco's
// reductions): bf16 and fp16 held as their 16-bit patterns, to and from float, rounding to nearest
// even. Here once so both packages round the same way.
#pragma once

namespace mori::shmem::detail {

__device__ __forceinline__ float Bf16ToFloat(unsigned short v) { return __uint_as_float(static_cast<unsigned>(v) << 16); }

__device__ __forceinline__ unsigned short FloatToBf16(float f) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}

__device__ __forceinline__ float Fp16ToFloat(unsigned short v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}

__device__ __forceinline__ unsigned short FloatToFp16(float f) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}

}  // namespace mori::shmem::detail
