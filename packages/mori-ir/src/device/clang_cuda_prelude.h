// SPDX-License-Identifier: MIT
// What mori-shmem's device headers take from the CUDA toolkit, for clang compiling CUDA with
// -nocudainc: the bitcode must build on a machine with clang alone (CI has no CUDA toolkit, and
// clang supports only some toolkit versions). nvcc and NVRTC never see this file.
//
// Everything is inline PTX or a target-independent NVPTX builtin, so it needs no PTX-version
// target feature at build time: the bitcode stays arch-neutral and the consumer (Triton, llc)
// picks the PTX version and SM when it generates code. The PTX used needs sm_70 or newer.
#pragma once

#if !defined(__clang__) || !defined(__CUDA__)
#error "clang_cuda_prelude.h is for clang -x cuda -nocudainc only"
#endif

#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __host__ __attribute__((host))
#define __constant__ __attribute__((constant))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))

typedef __SIZE_TYPE__ size_t;

__device__ __forceinline__ void* memcpy(void* d, const void* s, size_t n) { return __builtin_memcpy(d, s, n); }

#include <__clang_cuda_builtin_vars.h>  // threadIdx, blockDim, ... (clang's own header)

struct __attribute__((aligned(8))) uint2 {
  unsigned int x, y;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned int x, y, z, w;
};

// __syncthreads is a clang builtin (a convergent bar.sync 0).
__device__ __forceinline__ void __syncwarp(unsigned int mask = 0xffffffffu) {
  asm volatile("bar.warp.sync %0;" ::"r"(mask) : "memory");
}
__device__ __forceinline__ void __threadfence_system() { asm volatile("membar.sys;" ::: "memory"); }
__device__ __forceinline__ void __nanosleep(unsigned int ns) { asm volatile("nanosleep.u32 %0;" ::"r"(ns)); }

__device__ __forceinline__ unsigned int __shfl_sync(unsigned int mask, unsigned int v, int lane) {
  unsigned int r;
  asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, %3;" : "=r"(r) : "r"(v), "r"(lane), "r"(mask));
  return r;
}
__device__ __forceinline__ unsigned long long __shfl_sync(unsigned int mask, unsigned long long v, int lane) {
  const unsigned int lo = __shfl_sync(mask, static_cast<unsigned int>(v), lane);
  const unsigned int hi = __shfl_sync(mask, static_cast<unsigned int>(v >> 32), lane);
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

__device__ __forceinline__ unsigned int __funnelshift_r(unsigned int lo, unsigned int hi, unsigned int shift) {
  unsigned int r;
  asm("shf.r.wrap.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(lo), "r"(hi), "r"(shift));
  return r;
}

__device__ __forceinline__ unsigned int __isGlobal(const void* p) {
  unsigned int r;
  asm("{\n\t.reg .pred q;\n\tisspacep.global q, %1;\n\tselp.u32 %0, 1, 0, q;\n\t}" : "=r"(r) : "l"(p));
  return r;
}
__device__ __forceinline__ size_t __cvta_generic_to_global(const void* p) {
  size_t r;
  asm("cvta.to.global.u64 %0, %1;" : "=l"(r) : "l"(p));
  return r;
}

// The *_system atomics: relaxed, system scope, as the CUDA toolkit's.
#define MORI_IR_ATOMIC_(Name, op)                                                                  \
  __device__ __forceinline__ unsigned int Name(unsigned int* p, unsigned int v) {                  \
    unsigned int r;                                                                                \
    asm volatile("atom.sys." op ".b32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory");       \
    return r;                                                                                      \
  }                                                                                                \
  __device__ __forceinline__ unsigned long long Name(unsigned long long* p, unsigned long long v) { \
    unsigned long long r;                                                                          \
    asm volatile("atom.sys." op ".b64 %0, [%1], %2;" : "=l"(r) : "l"(p), "l"(v) : "memory");       \
    return r;                                                                                      \
  }
MORI_IR_ATOMIC_(atomicAnd_system, "and")
MORI_IR_ATOMIC_(atomicOr_system, "or")
MORI_IR_ATOMIC_(atomicXor_system, "xor")
MORI_IR_ATOMIC_(atomicExch_system, "exch")
#undef MORI_IR_ATOMIC_

__device__ __forceinline__ unsigned int atomicAdd_system(unsigned int* p, unsigned int v) {
  unsigned int r;
  asm volatile("atom.sys.add.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "r"(v) : "memory");
  return r;
}
__device__ __forceinline__ unsigned long long atomicAdd_system(unsigned long long* p, unsigned long long v) {
  unsigned long long r;
  asm volatile("atom.sys.add.u64 %0, [%1], %2;" : "=l"(r) : "l"(p), "l"(v) : "memory");
  return r;
}
__device__ __forceinline__ unsigned int atomicCAS_system(unsigned int* p, unsigned int cmp, unsigned int v) {
  unsigned int r;
  asm volatile("atom.sys.cas.b32 %0, [%1], %2, %3;" : "=r"(r) : "l"(p), "r"(cmp), "r"(v) : "memory");
  return r;
}
__device__ __forceinline__ unsigned long long atomicCAS_system(unsigned long long* p, unsigned long long cmp,
                                                               unsigned long long v) {
  unsigned long long r;
  asm volatile("atom.sys.cas.b64 %0, [%1], %2, %3;" : "=l"(r) : "l"(p), "l"(cmp), "l"(v) : "memory");
  return r;
}
