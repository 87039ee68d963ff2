// SPDX-License-Identifier: MIT
// What the dispatch and combine kernels share: region access, the bounded wait for a peer's
// word, the end-of-grid election, and element conversions (inline PTX, so NVRTC needs no
// cuda_fp8.h; results match src/cpu/convert.hpp bit for bit, NaN payloads aside).
#pragma once

#include "ep_args.h"
#include "mori_shmem/device/ptx.cuh"

namespace mori::ep {

using shmem::detail::GlobalTimerNs;
using shmem::detail::LdAcquireSys;
using shmem::detail::LdGlobal;
using shmem::detail::StGlobal;
using shmem::detail::StReleaseSys;

constexpr unsigned kFullMask = 0xFFFFFFFFu;

template <typename T>
__device__ __forceinline__ T* At(unsigned long long base, unsigned long long offset) {
  return reinterpret_cast<T*>(base + offset);
}

__device__ __forceinline__ void RecordError(const mori_ep_args_t& a, unsigned code) {
  atomicCAS_system(At<unsigned>(a.region, MORI_EP_CTRL_ERROR), 0u, code);
}

// Spins until done(word) with acquire loads; after spin_timeout_ns records ERR_TIMEOUT and
// returns the last value, so a dead peer ends the kernel instead of hanging it. Also gives up
// early once this PE has recorded an error, so one timeout does not cost one per wait.
template <typename T, typename Pred>
__device__ T WaitFor(const mori_ep_args_t& a, const T* word, Pred done) {
  T v = LdAcquireSys(word);
  if (done(v)) return v;
  const unsigned long long start = GlobalTimerNs();
  for (unsigned spin = 1;; ++spin) {
    v = LdAcquireSys(word);
    if (done(v)) return v;
    if (spin % 64 == 0) {
      const unsigned long long waited = GlobalTimerNs() - start;
      if (a.spin_timeout_ns != 0 && waited >= a.spin_timeout_ns) {
        RecordError(a, MORI_EP_ERR_TIMEOUT);
        return v;
      }
      if (*reinterpret_cast<volatile unsigned*>(At<unsigned>(a.region, MORI_EP_CTRL_ERROR)) == MORI_EP_ERR_TIMEOUT) {
        return v;
      }
      if (waited > 100000) __nanosleep(256);  // no longer latency-bound: leave issue slots to peers
    }
  }
}

// Called by every block when it is done with its part; true in the one block that finished last,
// which then sees every other block's writes (each published them with a system fence first).
// Resets the counter for the next launch, so graph replays need no host reset.
__device__ __forceinline__ bool LastBlock(const mori_ep_args_t& a, unsigned ctrl_offset) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    unsigned* arrive = At<unsigned>(a.region, ctrl_offset);
    last = atomicAdd(arrive, 1u) == gridDim.x - 1;
    if (last) {
      *arrive = 0;
      __threadfence_system();
    }
  }
  __syncthreads();
  return last;
}

// ---- element conversions -------------------------------------------------------------------

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

// Two floats to two e4m3fn bytes (lo = a), saturating to +-448.
__device__ __forceinline__ unsigned short FloatsToFp8x2(float a, float b) {
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
}

// Two e4m3fn bytes (lo first) to floats, exactly (through f16, which holds every e4m3 value).
__device__ __forceinline__ void Fp8x2ToFloats(unsigned short v, float& a, float& b) {
  unsigned h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  a = Fp16ToFloat(static_cast<unsigned short>(h2 & 0xFFFF));
  b = Fp16ToFloat(static_cast<unsigned short>(h2 >> 16));
}

}  // namespace mori::ep
