// SPDX-License-Identifier: MIT
// One-sided data movement: put / get (non-blocking and blocking), immediate put of a scalar, and
// put with signal, at thread, warp and block scope.
//
// Scopes. Thread: the calling thread does the whole operation by itself. Warp: ALL 32 lanes of
// the warp call with the same arguments and split the work; the call ends with __syncwarp().
// Block: ALL threads of the block call with the same arguments and split the work; the call ends
// with __syncthreads(). Calling a warp/block form from a diverged warp or from part of a block
// deadlocks or corrupts, as with any collective.
//
// Addresses. Put: dest is a symmetric address (inside this PE's heap; the data lands at pe's copy
// of it), src any local device memory (global or shared). Get: src symmetric, dest any local
// device memory. The ranges must not overlap.
//
// Ordering. Data stores are weak: a non-blocking put is unordered with respect to everything
// else until a fence, quiet, barrier or signal (release) of the calling group. Blocking forms end
// with a quiet (fence.sc.sys) by every participating thread. The signal of a put-with-signal is a
// release at system scope issued after the group barrier, so whoever acquires the signal word
// (ShmemWaitUntil, any ld.acquire.sys) sees all of the data.
//
// Errors. pe out of range or not reachable: MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE; a symmetric
// range outside the heap, or a misaligned signal/immediate word: ERR_BAD_ADDRESS; an unknown
// signal op or immediate size: ERR_INVALID_ARGUMENT. The first error is kept in the PE's error
// word, the call touches no memory, and the group still passes its barrier.
// qpId is accepted for MORI compatibility; load/store P2P has no queue pairs.
// PEs that are not load/store reachable (another host, P2P disabled) go through the device proxy
// (proxy.cuh): same calls, same ordering guarantees, network latency.
#pragma once

#include "copy.cuh"
#include "fence.cuh"
#include "proxy.cuh"
#include "ptx.cuh"
#include "state.cuh"
#include "traits.cuh"

namespace mori::shmem {
namespace detail {

// A transfer with a PE behind the device proxy: one thread posts it for the whole group, after
// the group barrier (so every thread's source bytes are written) and before the closing one.
template <typename G>
__device__ __forceinline__ void ProxyGroupTransfer(const ShmemDeviceState& st, unsigned int op, const void* symmetric,
                                                   const void* local, unsigned long long bytes, int pe,
                                                   bool blocking) {
  G::Sync();
  if (G::Rank() == 0) {
    ProxyTransfer(MORI_SHMEM_PROXY_ARGS(st), op, symmetric, local, bytes, pe);
    if (blocking) ProxyQuiet(MORI_SHMEM_PROXY_ARGS(st), st.my_pe);
  }
  G::Sync();
}

template <typename G>
__device__ __forceinline__ void PutMem(const ShmemDeviceState& st, void* dest, const void* src,
                                       unsigned long long bytes, int pe, bool blocking) {
  if (ViaProxy(st, pe)) return ProxyGroupTransfer<G>(st, MORI_SHMEM_PROXY_PUT, dest, src, bytes, pe, blocking);
  if (bytes != 0) {
    char* d = PeerAddr(st, dest, bytes, pe);
    if (d != nullptr) GroupCopy<G>(d, src, bytes);
  }
  if (blocking) FenceScSys();
  G::Sync();
}

template <typename G>
__device__ __forceinline__ void GetMem(const ShmemDeviceState& st, void* dest, const void* src,
                                       unsigned long long bytes, int pe, bool blocking) {
  if (ViaProxy(st, pe)) return ProxyGroupTransfer<G>(st, MORI_SHMEM_PROXY_GET, src, dest, bytes, pe, false);
  if (bytes != 0) {
    const char* s = PeerAddr(st, src, bytes, pe);
    if (s != nullptr) GroupCopy<G>(dest, s, bytes);
  }
  if (blocking) FenceScSys();
  G::Sync();
}

__device__ __forceinline__ bool IsSignalOp(int op) {
  return op == core::SIGNAL_SET || op == core::AMO_SET || op == core::SIGNAL_ADD || op == core::AMO_ADD;
}

// The release makes every store that precedes it in causality order visible before the signal:
// this thread's own stores (program order) and, after the group barrier, the other threads'.
__device__ __forceinline__ void SignalRelease(unsigned long long* sig, unsigned long long value, int op) {
  if (op == core::SIGNAL_SET || op == core::AMO_SET) {
    StReleaseSys(sig, value);
  } else {
    RedAddReleaseSys(sig, value);
  }
}

template <typename G>
__device__ __forceinline__ void PutMemSignal(const ShmemDeviceState& st, void* dest, const void* src,
                                             unsigned long long bytes, void* sigDest, unsigned long long sigVal,
                                             int sigOp, int pe) {
  if (ViaProxy(st, pe)) {
    G::Sync();
    if (G::Rank() == 0) {
      if (IsSignalOp(sigOp)) {
        ProxyPutSignal(MORI_SHMEM_PROXY_ARGS(st), dest, src, bytes, sigDest, sigVal, sigOp, pe);
      } else {
        SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
      }
    }
    G::Sync();
    return;
  }
  // Everything is checked before anything is written, so a peer never sees a signal without
  // its data.
  const unsigned long long base = PeerBase(st, pe);
  char* sig = nullptr;
  if (!IsSignalOp(sigOp)) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
  } else {
    sig = PeerWordAt(st, base, sigDest, 8);
  }
  char* d = nullptr;
  if (sig != nullptr && bytes != 0) {
    d = PeerAddrAt(st, base, dest, bytes);
    if (d != nullptr) GroupCopy<G>(d, src, bytes);
  }
  G::Sync();
  if (sig != nullptr && (bytes == 0 || d != nullptr) && G::Rank() == 0) {
    SignalRelease(reinterpret_cast<unsigned long long*>(sig), sigVal, sigOp);
  }
}

template <typename SigWord>
__device__ __forceinline__ void CheckSignalWordType() {
  static_assert(IsWordInt<SigWord>::value && sizeof(SigWord) == 8,
                "the signal word is a 64-bit integer (unsigned long long, or uint64_t)");
}

__device__ __forceinline__ void PutImm(const ShmemDeviceState& st, void* dest, const void* val, unsigned int bytes,
                                       int pe) {
  if (bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
    return;
  }
  if (ViaProxy(st, pe)) {
    unsigned long long bits = 0;
    memcpy(&bits, val, bytes);  // little endian: the low `bytes` bytes are the value
    ProxyPutImm(MORI_SHMEM_PROXY_ARGS(st), dest, bits, bytes, pe);
    return;
  }
  char* d = PeerWord(st, dest, bytes, pe);
  if (d == nullptr) return;
  // memcpy: val need not be aligned (IR callers pass any pointer); for a local it is one load.
  switch (bytes) {
    case 1: {
      unsigned char v;
      memcpy(&v, val, 1);
      StRelaxedSys(reinterpret_cast<unsigned char*>(d), v);
      break;
    }
    case 2: {
      unsigned short v;
      memcpy(&v, val, 2);
      StRelaxedSys(reinterpret_cast<unsigned short*>(d), v);
      break;
    }
    case 4: {
      unsigned int v;
      memcpy(&v, val, 4);
      StRelaxedSys(reinterpret_cast<unsigned int*>(d), v);
      break;
    }
    default: {
      unsigned long long v;
      memcpy(&v, val, 8);
      StRelaxedSys(reinterpret_cast<unsigned long long*>(d), v);
      break;
    }
  }
}

}  // namespace detail

// ---- put / get of bytes ----------------------------------------------------------------------
// ShmemPutMemNbi{Scope}(dest, src, bytes, pe[, qpId])   non-blocking put
// ShmemPutMem{Scope}                                       blocking put (= nbi + quiet)
// ShmemGetMemNbi{Scope}(dest, src, bytes, pe[, qpId])   non-blocking get
// ShmemGetMem{Scope}                                       blocking get (= nbi + quiet)
// each with the state as an optional first argument.

#define MORI_SHMEM_DEFINE_MEM_(Name, Impl, Group, Blocking)                                                         \
  __device__ __forceinline__ void Name(const ShmemDeviceState& st, void* dest, const void* src, size_t bytes, int pe, \
                                       int qpId = 0) {                                                               \
    (void)qpId;                                                                                                      \
    detail::Impl<detail::Group>(st, dest, src, bytes, pe, Blocking);                                                 \
  }                                                                                                                  \
  __device__ __forceinline__ void Name(void* dest, const void* src, size_t bytes, int pe, int qpId = 0) {           \
    Name(MORI_SHMEM_GLOBAL_STATE, dest, src, bytes, pe, qpId);                                                       \
  }

MORI_SHMEM_DEFINE_MEM_(ShmemPutMemNbiThread, PutMem, ThreadGroup, false)
MORI_SHMEM_DEFINE_MEM_(ShmemPutMemNbiWarp, PutMem, WarpGroup, false)
MORI_SHMEM_DEFINE_MEM_(ShmemPutMemNbiBlock, PutMem, BlockGroup, false)
MORI_SHMEM_DEFINE_MEM_(ShmemPutMemThread, PutMem, ThreadGroup, true)
MORI_SHMEM_DEFINE_MEM_(ShmemPutMemWarp, PutMem, WarpGroup, true)
MORI_SHMEM_DEFINE_MEM_(ShmemPutMemBlock, PutMem, BlockGroup, true)
MORI_SHMEM_DEFINE_MEM_(ShmemGetMemNbiThread, GetMem, ThreadGroup, false)
MORI_SHMEM_DEFINE_MEM_(ShmemGetMemNbiWarp, GetMem, WarpGroup, false)
MORI_SHMEM_DEFINE_MEM_(ShmemGetMemNbiBlock, GetMem, BlockGroup, false)
MORI_SHMEM_DEFINE_MEM_(ShmemGetMemThread, GetMem, ThreadGroup, true)
MORI_SHMEM_DEFINE_MEM_(ShmemGetMemWarp, GetMem, WarpGroup, true)
MORI_SHMEM_DEFINE_MEM_(ShmemGetMemBlock, GetMem, BlockGroup, true)
#undef MORI_SHMEM_DEFINE_MEM_

// ---- typed put / get: nelems elements of T -----------------------------------------------------
// ShmemPutTypeNbi{Scope}<T>(dest, src, nelems, pe[, qpId]), ShmemPutType{Scope}<T> (blocking),
// ShmemGetTypeNbi{Scope}<T>, ShmemGetType{Scope}<T>.

#define MORI_SHMEM_DEFINE_TYPED_(Name, MemName)                                                                \
  template <typename T>                                                                                      \
  __device__ __forceinline__ void Name(const ShmemDeviceState& st, T* dest, const T* src, size_t nelems, int pe, \
                                       int qpId = 0) {                                                       \
    MemName(st, dest, src, nelems * sizeof(T), pe, qpId);                                                    \
  }                                                                                                          \
  template <typename T>                                                                                      \
  __device__ __forceinline__ void Name(T* dest, const T* src, size_t nelems, int pe, int qpId = 0) {        \
    MemName(MORI_SHMEM_GLOBAL_STATE, dest, src, nelems * sizeof(T), pe, qpId);                               \
  }

MORI_SHMEM_DEFINE_TYPED_(ShmemPutTypeNbiThread, ShmemPutMemNbiThread)
MORI_SHMEM_DEFINE_TYPED_(ShmemPutTypeNbiWarp, ShmemPutMemNbiWarp)
MORI_SHMEM_DEFINE_TYPED_(ShmemPutTypeNbiBlock, ShmemPutMemNbiBlock)
MORI_SHMEM_DEFINE_TYPED_(ShmemPutTypeThread, ShmemPutMemThread)
MORI_SHMEM_DEFINE_TYPED_(ShmemPutTypeWarp, ShmemPutMemWarp)
MORI_SHMEM_DEFINE_TYPED_(ShmemPutTypeBlock, ShmemPutMemBlock)
MORI_SHMEM_DEFINE_TYPED_(ShmemGetTypeNbiThread, ShmemGetMemNbiThread)
MORI_SHMEM_DEFINE_TYPED_(ShmemGetTypeNbiWarp, ShmemGetMemNbiWarp)
MORI_SHMEM_DEFINE_TYPED_(ShmemGetTypeNbiBlock, ShmemGetMemNbiBlock)
MORI_SHMEM_DEFINE_TYPED_(ShmemGetTypeThread, ShmemGetMemThread)
MORI_SHMEM_DEFINE_TYPED_(ShmemGetTypeWarp, ShmemGetMemWarp)
MORI_SHMEM_DEFINE_TYPED_(ShmemGetTypeBlock, ShmemGetMemBlock)
#undef MORI_SHMEM_DEFINE_TYPED_

// MORI's named typed families: ShmemPut{Type}Nbi{Scope}, ShmemGet{Type}Nbi{Scope} and the
// blocking ShmemPut{Type}{Scope}, ShmemGet{Type}{Scope}, for the types below.
// The integer names are also those of the immediate puts below.
#define MORI_SHMEM_FOR_EACH_INT_TYPE(X) \
  X(Uint8, unsigned char)               \
  X(Int8, signed char)                  \
  X(Uint16, unsigned short)             \
  X(Int16, short)                       \
  X(Uint32, unsigned int)               \
  X(Int32, int)                         \
  X(Uint64, unsigned long long)         \
  X(Int64, long long)
#define MORI_SHMEM_FOR_EACH_RMA_TYPE(X) MORI_SHMEM_FOR_EACH_INT_TYPE(X) X(Float, float) X(Double, double)

#define MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(Name, Generic, T)                                                       \
  __device__ __forceinline__ void Name(const ShmemDeviceState& st, T* dest, const T* src, size_t nelems, int pe,   \
                                       int qpId = 0) {                                                             \
    Generic<T>(st, dest, src, nelems, pe, qpId);                                                                   \
  }                                                                                                                \
  __device__ __forceinline__ void Name(T* dest, const T* src, size_t nelems, int pe, int qpId = 0) {              \
    Generic<T>(MORI_SHMEM_GLOBAL_STATE, dest, src, nelems, pe, qpId);                                              \
  }
#define MORI_SHMEM_DEFINE_NAMED_TYPED_(TypeName, T)                                                       \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemPut##TypeName##NbiThread, ShmemPutTypeNbiThread, T)             \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemPut##TypeName##NbiWarp, ShmemPutTypeNbiWarp, T)                 \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemPut##TypeName##NbiBlock, ShmemPutTypeNbiBlock, T)               \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemPut##TypeName##Thread, ShmemPutTypeThread, T)                   \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemPut##TypeName##Warp, ShmemPutTypeWarp, T)                       \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemPut##TypeName##Block, ShmemPutTypeBlock, T)                     \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemGet##TypeName##NbiThread, ShmemGetTypeNbiThread, T)             \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemGet##TypeName##NbiWarp, ShmemGetTypeNbiWarp, T)                 \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemGet##TypeName##NbiBlock, ShmemGetTypeNbiBlock, T)               \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemGet##TypeName##Thread, ShmemGetTypeThread, T)                   \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemGet##TypeName##Warp, ShmemGetTypeWarp, T)                       \
  MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_(ShmemGet##TypeName##Block, ShmemGetTypeBlock, T)

MORI_SHMEM_FOR_EACH_RMA_TYPE(MORI_SHMEM_DEFINE_NAMED_TYPED_)
#undef MORI_SHMEM_DEFINE_NAMED_TYPED_
#undef MORI_SHMEM_DEFINE_NAMED_TYPED_ONE_

// ---- put with signal ---------------------------------------------------------------------------
// ShmemPutMemNbiSignal{Scope}(dest, src, bytes, sigDest, sigVal, sigOp, pe[, qpId]): the put, then
// (after the group barrier) ONE thread of the group updates pe's copy of the 64-bit signal word
// sigDest (symmetric, 8-byte aligned) with a system-scope release: sigOp SIGNAL_SET / AMO_SET
// stores sigVal, SIGNAL_ADD / AMO_ADD adds it. A PE that acquires the signal and sees the update
// sees the data. Non-blocking: the caller's later accesses are not ordered after the put.
// sigDest may be unsigned long long* or uint64_t* (unsigned long* on LP64).
// ShmemPutTypeNbiSignal{Scope}<T>(dest, src, nelems, ...) is the same with a count of elements.

#define MORI_SHMEM_DEFINE_SIGNAL_(Scope, Group)                                                                    \
  template <typename SigWord>                                                                                      \
  __device__ __forceinline__ void ShmemPutMemNbiSignal##Scope(const ShmemDeviceState& st, void* dest,              \
                                                              const void* src, size_t bytes, SigWord* sigDest,     \
                                                              unsigned long long sigVal, int sigOp, int pe,        \
                                                              int qpId = 0) {                                      \
    detail::CheckSignalWordType<SigWord>();                                                                        \
    (void)qpId;                                                                                                    \
    detail::PutMemSignal<detail::Group>(st, dest, src, bytes, sigDest, sigVal, sigOp, pe);                         \
  }                                                                                                                \
  template <typename SigWord>                                                                                      \
  __device__ __forceinline__ void ShmemPutMemNbiSignal##Scope(void* dest, const void* src, size_t bytes,           \
                                                              SigWord* sigDest, unsigned long long sigVal,         \
                                                              int sigOp, int pe, int qpId = 0) {                   \
    ShmemPutMemNbiSignal##Scope(MORI_SHMEM_GLOBAL_STATE, dest, src, bytes, sigDest, sigVal, sigOp, pe, qpId);      \
  }                                                                                                                \
  template <typename T, typename SigWord>                                                                          \
  __device__ __forceinline__ void ShmemPutTypeNbiSignal##Scope(const ShmemDeviceState& st, T* dest, const T* src,  \
                                                               size_t nelems, SigWord* sigDest,                    \
                                                               unsigned long long sigVal, int sigOp, int pe,       \
                                                               int qpId = 0) {                                     \
    ShmemPutMemNbiSignal##Scope(st, dest, src, nelems * sizeof(T), sigDest, sigVal, sigOp, pe, qpId);              \
  }                                                                                                                \
  template <typename T, typename SigWord>                                                                          \
  __device__ __forceinline__ void ShmemPutTypeNbiSignal##Scope(T* dest, const T* src, size_t nelems,               \
                                                               SigWord* sigDest, unsigned long long sigVal,        \
                                                               int sigOp, int pe, int qpId = 0) {                  \
    ShmemPutMemNbiSignal##Scope(MORI_SHMEM_GLOBAL_STATE, dest, src, nelems * sizeof(T), sigDest, sigVal, sigOp,   \
                                pe, qpId);                                                                         \
  }

MORI_SHMEM_DEFINE_SIGNAL_(Thread, ThreadGroup)
MORI_SHMEM_DEFINE_SIGNAL_(Warp, WarpGroup)
MORI_SHMEM_DEFINE_SIGNAL_(Block, BlockGroup)
#undef MORI_SHMEM_DEFINE_SIGNAL_

// ---- immediate put of a scalar -----------------------------------------------------------------
// A single relaxed, system-scope store of 1, 2, 4 or 8 bytes (the word whole, never torn) to pe's
// copy of dest, which must be naturally aligned. Warp scope: lane 0 stores on behalf of the warp
// (every lane may call; no lane waits for the others). Unordered like any nbi put.

__device__ __forceinline__ void ShmemPutSizeImmNbiThread(const ShmemDeviceState& st, void* dest, const void* val,
                                                         size_t bytes, int pe, int qpId = 0) {
  (void)qpId;
  detail::PutImm(st, dest, val, static_cast<unsigned int>(bytes > 8 ? 0 : bytes), pe);
}
__device__ __forceinline__ void ShmemPutSizeImmNbiWarp(const ShmemDeviceState& st, void* dest, const void* val,
                                                       size_t bytes, int pe, int qpId = 0) {
  if (detail::LaneId() == 0) ShmemPutSizeImmNbiThread(st, dest, val, bytes, pe, qpId);
}
__device__ __forceinline__ void ShmemPutSizeImmNbiThread(void* dest, const void* val, size_t bytes, int pe,
                                                         int qpId = 0) {
  ShmemPutSizeImmNbiThread(MORI_SHMEM_GLOBAL_STATE, dest, val, bytes, pe, qpId);
}
__device__ __forceinline__ void ShmemPutSizeImmNbiWarp(void* dest, const void* val, size_t bytes, int pe,
                                                       int qpId = 0) {
  ShmemPutSizeImmNbiWarp(MORI_SHMEM_GLOBAL_STATE, dest, val, bytes, pe, qpId);
}

template <typename T>
__device__ __forceinline__ void ShmemPutTypeImmNbiThread(const ShmemDeviceState& st, T* dest, detail::NoDeduce<T> val,
                                                         int pe, int qpId = 0) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8,
                "an immediate put moves 1, 2, 4 or 8 bytes");
  const T v = val;
  ShmemPutSizeImmNbiThread(st, dest, &v, sizeof(T), pe, qpId);
}
template <typename T>
__device__ __forceinline__ void ShmemPutTypeImmNbiWarp(const ShmemDeviceState& st, T* dest, detail::NoDeduce<T> val,
                                                       int pe, int qpId = 0) {
  if (detail::LaneId() == 0) ShmemPutTypeImmNbiThread<T>(st, dest, val, pe, qpId);
}
template <typename T>
__device__ __forceinline__ void ShmemPutTypeImmNbiThread(T* dest, detail::NoDeduce<T> val, int pe, int qpId = 0) {
  ShmemPutTypeImmNbiThread<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, pe, qpId);
}
template <typename T>
__device__ __forceinline__ void ShmemPutTypeImmNbiWarp(T* dest, detail::NoDeduce<T> val, int pe, int qpId = 0) {
  ShmemPutTypeImmNbiWarp<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, pe, qpId);
}

// MORI's named immediate families: ShmemPut{Type}ImmNbi{Thread,Warp}(dest, val, pe[, qpId]).

#define MORI_SHMEM_DEFINE_NAMED_IMM_ONE_(Name, Generic, T)                                                   \
  __device__ __forceinline__ void Name(const ShmemDeviceState& st, T* dest, T val, int pe, int qpId = 0) {   \
    Generic<T>(st, dest, val, pe, qpId);                                                                     \
  }                                                                                                          \
  __device__ __forceinline__ void Name(T* dest, T val, int pe, int qpId = 0) {                               \
    Generic<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, pe, qpId);                                                \
  }
#define MORI_SHMEM_DEFINE_NAMED_IMM_(TypeName, T)                                                    \
  MORI_SHMEM_DEFINE_NAMED_IMM_ONE_(ShmemPut##TypeName##ImmNbiThread, ShmemPutTypeImmNbiThread, T)    \
  MORI_SHMEM_DEFINE_NAMED_IMM_ONE_(ShmemPut##TypeName##ImmNbiWarp, ShmemPutTypeImmNbiWarp, T)

MORI_SHMEM_FOR_EACH_INT_TYPE(MORI_SHMEM_DEFINE_NAMED_IMM_)
#undef MORI_SHMEM_DEFINE_NAMED_IMM_
#undef MORI_SHMEM_DEFINE_NAMED_IMM_ONE_

}  // namespace mori::shmem
