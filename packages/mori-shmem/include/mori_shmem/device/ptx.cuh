// SPDX-License-Identifier: MIT
// Inline-PTX primitives of the device API: scoped loads/stores/reductions, fences, the timer, and
// explicitly global vector accesses for the copy loops.
//
// Every asm here is `volatile` with a "memory" clobber, so the compiler neither drops it nor moves
// ordinary loads and stores across it; the hardware ordering is what the PTX qualifier says.
// Addresses are generic (no state space) unless the name says Global: peers' heaps are global
// memory mapped into this process, but a generic access is valid for them too and costs nothing
// measurable on a flag.
#pragma once

namespace mori::shmem::detail {

__device__ __forceinline__ unsigned int LaneId() {
  unsigned int lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

// Nanoseconds, the same clock on every SM of a GPU (and of every GPU in a host, give or take
// their skew, which a timeout of milliseconds does not notice).
__device__ __forceinline__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- loads ---------------------------------------------------------------------------------

__device__ __forceinline__ unsigned int LdAcquireSys(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.sys.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long LdAcquireSys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// Two adjacent words in one 16-byte load (p 16-byte aligned): one round trip where p is host memory.
__device__ __forceinline__ void LdVolatilePair(const unsigned long long* p, unsigned long long* first,
                                               unsigned long long* second) {
  asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(*first), "=l"(*second) : "l"(p) : "memory");
}
__device__ __forceinline__ unsigned int LdRelaxedSys(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.relaxed.sys.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// ---- stores --------------------------------------------------------------------------------

__device__ __forceinline__ void StReleaseSys(unsigned int* p, unsigned int v) {
  asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void StReleaseSys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Relaxed, system scope: a single-copy-atomic store that a peer's (acquire) load sees whole,
// with no ordering cost on the storing thread.
__device__ __forceinline__ void StRelaxedSys(unsigned char* p, unsigned char v) {
  asm volatile("st.relaxed.sys.b8 [%0], %1;" ::"l"(p), "h"(static_cast<unsigned short>(v)) : "memory");
}
__device__ __forceinline__ void StRelaxedSys(unsigned short* p, unsigned short v) {
  asm volatile("st.relaxed.sys.b16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}
__device__ __forceinline__ void StRelaxedSys(unsigned int* p, unsigned int v) {
  asm volatile("st.relaxed.sys.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void StRelaxedSys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.sys.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// ---- reductions ----------------------------------------------------------------------------

__device__ __forceinline__ void RedAddReleaseSys(unsigned int* p, unsigned int v) {
  asm volatile("red.release.sys.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void RedAddReleaseSys(unsigned long long* p, unsigned long long v) {
  asm volatile("red.release.sys.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// ---- fences --------------------------------------------------------------------------------

// Orders this thread's earlier memory operations before its later ones for every observer in
// the system (other GPUs, other processes under MPS, the host). Store->load order is not
// included; that needs FenceScSys.
__device__ __forceinline__ void FenceAcqRelSys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }

// Sequentially consistent system fence (what __threadfence_system() emits).
__device__ __forceinline__ void FenceScSys() { asm volatile("fence.sc.sys;" ::: "memory"); }

// ---- explicitly global vector accesses (the copy loops' fast path) -----------------------------
//
// With a generic pointer the compiler emits generic LD/ST; these pin LDG/STG. Only for addresses
// that __isGlobal() accepted. Weak (non-.sys) on purpose: bulk data needs no per-access ordering,
// a later fence or release orders it as a whole.

__device__ __forceinline__ uint4 LdGlobal(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(__cvta_generic_to_global(p))
               : "memory");
  return v;
}
__device__ __forceinline__ uint2 LdGlobal(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "l"(__cvta_generic_to_global(p))
               : "memory");
  return v;
}
__device__ __forceinline__ unsigned int LdGlobal(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.global.u32 %0, [%1];" : "=r"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
  return v;
}
__device__ __forceinline__ void StGlobal(uint4* p, const uint4& v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(p)), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void StGlobal(uint2* p, const uint2& v) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(__cvta_generic_to_global(p)), "r"(v.x), "r"(v.y)
               : "memory");
}
__device__ __forceinline__ void StGlobal(unsigned int* p, const unsigned int& v) {
  asm volatile("st.global.u32 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(v) : "memory");
}

}  // namespace mori::shmem::detail
