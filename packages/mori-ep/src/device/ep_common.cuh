// SPDX-License-Identifier: MIT
// What the dispatch and combine kernels share: region access, the bounded wait for a peer's
// word, the end-of-grid election, and element conversions (inline PTX, so NVRTC needs no
// cuda_fp8.h; results match src/cpu/convert.hpp bit for bit, NaN payloads aside).
#pragma once

#include "ep_args.h"
#include "mori_shmem/device/convert.cuh"
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

// bf16 / fp16 <-> float: mori-shmem's, which mori-cco's reductions use too.
using ::mori::shmem::detail::Bf16ToFloat;
using ::mori::shmem::detail::FloatToBf16;
using ::mori::shmem::detail::Fp16ToFloat;
using ::mori::shmem::detail::FloatToFp16;

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

// e4m3fnuz (MI300's fp8): bias 8, 0x80 the only NaN, no -0, S.1111.111 = +-240 (a number).
// Written out in float arithmetic so that it matches src/cpu/convert.hpp bit for bit.
__device__ __forceinline__ float Fp8E4m3FnuzToFloat(unsigned v) {
  v &= 0xFFu;
  if (v == 0x80u) return __int_as_float(0x7FC00000);
  const int exponent = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  const float magnitude =
      exponent == 0 ? ldexpf(static_cast<float>(mantissa), -10) : ldexpf(1.0f + mantissa * 0.125f, exponent - 8);
  return (v & 0x80u) ? -magnitude : magnitude;
}

// Round to nearest even onto the e4m3fnuz grid, saturating to +-240; a value that rounds to zero
// is 0x00 whatever its sign (0x80 is NaN).
__device__ __forceinline__ unsigned char FloatToFp8E4m3Fnuz(float f) {
  if (isnan(f)) return 0x80;
  const unsigned char sign = signbit(f) ? 0x80 : 0;
  float magnitude = fabsf(f);
  if (magnitude != 0.0f) {
    int exponent;
    frexpf(magnitude, &exponent);
    exponent = max(exponent - 1, -7);
    const float quantum = ldexpf(1.0f, exponent - 3);
    magnitude = rintf(magnitude / quantum) * quantum;
  }
  if (magnitude >= 240.0f) return sign | 0x7F;
  if (magnitude == 0.0f) return 0x00;
  if (magnitude < ldexpf(1.0f, -7)) return sign | static_cast<unsigned char>(rintf(ldexpf(magnitude, 10)));
  int exponent;
  const float m = frexpf(magnitude, &exponent);
  const unsigned char mantissa = static_cast<unsigned char>(rintf((m * 2.0f - 1.0f) * 8.0f));
  return sign | static_cast<unsigned char>((exponent - 1 + 8) << 3) | mantissa;
}

}  // namespace mori::ep
