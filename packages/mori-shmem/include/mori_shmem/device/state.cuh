// SPDX-License-Identifier: MIT
// How device code finds the symmetric heap: the state struct, the per-module global copy of it,
// address translation to a peer's copy, and the device error word.
//
// Two ways for a kernel to get the state, and every API call comes in a form for each:
//   - by value, as a kernel argument (`mori_shmem_device_state_t st`), passed on as the first
//     argument of every call: ShmemPutMemNbiThread(st, dest, src, bytes, pe). Nothing to do after
//     loading the module; the state is in the kernel's parameter space (constant bank).
//   - through the module global `mori_shmem_device_state`, which the host fills after loading the
//     module (mori.shmem.shmem_module_init, by this unmangled symbol name): the same calls
//     without the first argument, ShmemPutMemNbiThread(dest, src, bytes, pe).
// The global is defined (one per module) by including this header, unless
// MORI_SHMEM_DEVICE_STATE_EXTERN is defined, in which case it is only declared: for -rdc builds
// where several translation units share one module, define it in exactly one of them.
#pragma once

#include "../device_state.h"
#include "codes.cuh"

// __constant__: device code only reads it, and the constant bank keeps it out of the L1 that
// every system-scope acquire load invalidates.
#ifdef MORI_SHMEM_DEVICE_STATE_EXTERN
extern "C" __constant__ mori_shmem_device_state_t mori_shmem_device_state;
#else
extern "C" {
__constant__ mori_shmem_device_state_t mori_shmem_device_state;
}
#endif

// The state the implicit forms use.
#define MORI_SHMEM_GLOBAL_STATE (::mori_shmem_device_state)

namespace mori::shmem {

typedef mori_shmem_device_state_t ShmemDeviceState;

namespace detail {

// Records the first device-side error of this PE; later ones do not overwrite it. A state that
// was never filled (heap_base 0) has nowhere to record anything, and such a state also fails
// every translation, so its calls touch no memory at all. Out of line, and taking the heap base
// by value (not the state by reference, which would make the caller spill a by-value kernel
// argument to memory): it is the cold path of every call, and inlining it everywhere only costs
// code.
__device__ inline __noinline__ void RecordError(unsigned long long heapBase, unsigned int code) {
  if (heapBase == 0) return;
  atomicCAS_system(reinterpret_cast<unsigned int*>(heapBase + MORI_SHMEM_SYNC_ERROR_OFFSET), 0u, code);
}
__device__ __forceinline__ void SetError(const ShmemDeviceState& st, unsigned int code) {
  RecordError(st.heap_base, code);
}

__device__ __forceinline__ unsigned int* ErrorWord(const ShmemDeviceState& st) {
  return reinterpret_cast<unsigned int*>(st.heap_base + MORI_SHMEM_SYNC_ERROR_OFFSET);
}

// Base of `pe`'s heap as mapped in this process, or 0 when pe is out of range or not load/store
// reachable.
__device__ __forceinline__ unsigned long long PeerBase(const ShmemDeviceState& st, int pe) {
  if (static_cast<unsigned int>(pe) >= static_cast<unsigned int>(st.n_pes)) return 0;
  if (pe < MORI_SHMEM_DEVICE_INLINE_PEERS) {
    // Selects, not an indexed load: indexing a kernel-parameter array dynamically makes the
    // compiler copy the whole state to local memory, i.e. back into the L1 this avoids.
    unsigned long long base = 0;
#pragma unroll
    for (int i = 0; i < MORI_SHMEM_DEVICE_INLINE_PEERS; ++i) base = pe == i ? st.peer_base[i] : base;
    return base;
  }
  if (st.peer_bases == 0) return 0;
  return reinterpret_cast<const unsigned long long*>(st.peer_bases)[pe];
}

// pe's copy of the symmetric range [addr, addr + bytes), or nullptr after recording why:
// ERR_UNREACHABLE_PE (pe out of range or not mapped) or ERR_BAD_ADDRESS (range not in the heap).
// The -At forms take pe's base from PeerBase, so a call translating two addresses of one PE looks
// it up once: on an H200 the two translations of an 8-byte put-with-signal measured ~0.4 us of
// its ~1.3 us latency (ci/gpu/shmem_latency_probe.py).
__device__ __forceinline__ char* PeerAddrAt(const ShmemDeviceState& st, unsigned long long base, const void* addr,
                                            unsigned long long bytes) {
  if (base == 0) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
    return nullptr;
  }
  // Unsigned: an address below heap_base wraps to a huge offset and fails the same test.
  const unsigned long long off = reinterpret_cast<unsigned long long>(addr) - st.heap_base;
  if (off >= st.heap_size || bytes > st.heap_size - off) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_BAD_ADDRESS);
    return nullptr;
  }
  return reinterpret_cast<char*>(base + off);
}

__device__ __forceinline__ char* PeerAddr(const ShmemDeviceState& st, const void* addr, unsigned long long bytes,
                                          int pe) {
  return PeerAddrAt(st, PeerBase(st, pe), addr, bytes);
}

// pe's copy of a naturally aligned word of `bytes` (1, 2, 4 or 8) bytes, or nullptr after
// recording why. A misaligned word would fault the kernel in the atomic or scoped access, so it
// is refused here as ERR_BAD_ADDRESS instead.
__device__ __forceinline__ char* PeerWordAt(const ShmemDeviceState& st, unsigned long long base, const void* addr,
                                            unsigned int bytes) {
  if ((reinterpret_cast<unsigned long long>(addr) & (bytes - 1)) != 0) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_BAD_ADDRESS);
    return nullptr;
  }
  return PeerAddrAt(st, base, addr, bytes);
}

__device__ __forceinline__ char* PeerWord(const ShmemDeviceState& st, const void* addr, unsigned int bytes, int pe) {
  return PeerWordAt(st, PeerBase(st, pe), addr, bytes);
}

}  // namespace detail

// ---- queries -------------------------------------------------------------------------------

__device__ __forceinline__ int ShmemMyPe(const ShmemDeviceState& st) { return st.my_pe; }
__device__ __forceinline__ int ShmemNPes(const ShmemDeviceState& st) { return st.n_pes; }
__device__ __forceinline__ int ShmemMyPe() { return ShmemMyPe(MORI_SHMEM_GLOBAL_STATE); }
__device__ __forceinline__ int ShmemNPes() { return ShmemNPes(MORI_SHMEM_GLOBAL_STATE); }

// The address through which this thread can load/store pe's copy of the symmetric address addr;
// nullptr when addr is outside the heap or pe is out of range or not reachable. A query: it
// records no error. ShmemPtrP2p(addr, ShmemMyPe()) == addr for any heap address.
__device__ __forceinline__ void* ShmemPtrP2p(const ShmemDeviceState& st, const void* addr, int pe) {
  const unsigned long long base = detail::PeerBase(st, pe);
  const unsigned long long off = reinterpret_cast<unsigned long long>(addr) - st.heap_base;
  if (base == 0 || off >= st.heap_size) return nullptr;
  return reinterpret_cast<void*>(base + off);
}
__device__ __forceinline__ void* ShmemPtrP2p(const void* addr, int pe) {
  return ShmemPtrP2p(MORI_SHMEM_GLOBAL_STATE, addr, pe);
}
// MORI's (addr, myPe, destPe) spelling; myPe is implied by the state and ignored.
__device__ __forceinline__ void* ShmemPtrP2p(const ShmemDeviceState& st, const void* addr, int myPe, int pe) {
  (void)myPe;
  return ShmemPtrP2p(st, addr, pe);
}
__device__ __forceinline__ void* ShmemPtrP2p(const void* addr, int myPe, int pe) {
  return ShmemPtrP2p(MORI_SHMEM_GLOBAL_STATE, addr, myPe, pe);
}

}  // namespace mori::shmem
