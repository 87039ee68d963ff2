// SPDX-License-Identifier: MIT
// Atomics on a peer's copy of a symmetric integer, system scope.
//
// T is any 4- or 8-byte integer (int, unsigned int, long long, unsigned long long, and long /
// unsigned long, so uint64_t from <cstdint> works). Every operation acts on the two's-complement
// bit pattern, where signed and unsigned agree, so signed types go through the unsigned forms.
// dest is a symmetric address, naturally aligned.
//
// Ordering: the RMWs and AMO_SET are relaxed (atomic, but unordered with respect to the caller's
// other accesses until a fence or quiet), as OpenSHMEM/NVSHMEM atomics. SIGNAL_SET / SIGNAL_ADD
// are releases: everything the caller wrote before is visible to whoever acquires the new value.
// AMO_FETCH is an acquire load.
//
// Warp scope: lane 0 performs the one operation on behalf of the warp; for fetching forms all 32
// lanes must call (the old value is broadcast with __shfl_sync) and all get the same result.
//
// Errors (recorded in the error word, nothing is modified): unknown or wrong-kind amoType (a
// fetching code to a non-fetch call or vice versa) ERR_INVALID_ARGUMENT; unreachable pe
// ERR_UNREACHABLE_PE; dest outside the heap or misaligned ERR_BAD_ADDRESS. A failed fetch returns 0.
#pragma once

#include "codes.cuh"
#include "proxy.cuh"
#include "ptx.cuh"
#include "state.cuh"
#include "traits.cuh"

namespace mori::shmem {
namespace detail {

__device__ __forceinline__ bool IsNonFetchAmo(int op) {
  switch (op) {
    case core::AMO_INC:
    case core::AMO_SET:
    case core::AMO_ADD:
    case core::AMO_AND:
    case core::AMO_OR:
    case core::AMO_XOR:
    case core::SIGNAL_SET:
    case core::SIGNAL_ADD:
      return true;
    default:
      return false;
  }
}

__device__ __forceinline__ bool IsFetchAmo(int op) { return op >= core::AMO_FETCH && op <= core::AMO_COMPARE_SWAP; }

template <typename T>
__device__ __forceinline__ void CheckAmoType() {
  static_assert(IsWordInt<T>::value, "atomics take a 4- or 8-byte integer type");
}

// U is unsigned int or unsigned long long.
template <typename U>
__device__ __forceinline__ void AmoNonFetchBits(U* p, U v, int op) {
  switch (op) {
    case core::AMO_INC:
      atomicAdd_system(p, U(1));
      break;
    case core::AMO_SET:
      StRelaxedSys(p, v);
      break;
    case core::AMO_ADD:
      atomicAdd_system(p, v);
      break;
    case core::AMO_AND:
      atomicAnd_system(p, v);
      break;
    case core::AMO_OR:
      atomicOr_system(p, v);
      break;
    case core::AMO_XOR:
      atomicXor_system(p, v);
      break;
    case core::SIGNAL_SET:
      StReleaseSys(p, v);
      break;
    default:  // core::SIGNAL_ADD (the caller checked the code)
      RedAddReleaseSys(p, v);
      break;
  }
}

template <typename U>
__device__ __forceinline__ U AmoFetchBits(U* p, U v, U compare, int op) {
  switch (op) {
    case core::AMO_FETCH:
      return LdAcquireSys(p);
    case core::AMO_FETCH_INC:
      return atomicAdd_system(p, U(1));
    case core::AMO_FETCH_ADD:
      return atomicAdd_system(p, v);
    case core::AMO_FETCH_AND:
      return atomicAnd_system(p, v);
    case core::AMO_FETCH_OR:
      return atomicOr_system(p, v);
    case core::AMO_FETCH_XOR:
      return atomicXor_system(p, v);
    case core::AMO_SWAP:
      return atomicExch_system(p, v);
    default:  // core::AMO_COMPARE_SWAP (the caller checked the code)
      return atomicCAS_system(p, compare, v);
  }
}

}  // namespace detail

// ---- generic forms ---------------------------------------------------------------------------

// amoType: AMO_INC (val ignored), AMO_SET, AMO_ADD, AMO_AND, AMO_OR, AMO_XOR, SIGNAL_SET, SIGNAL_ADD.
template <typename T>
__device__ __forceinline__ void ShmemAtomicTypeNonFetchThread(const ShmemDeviceState& st, T* dest,
                                                              detail::NoDeduce<T> val, int amoType, int pe,
                                                              int qpId = 0) {
  detail::CheckAmoType<T>();
  (void)qpId;
  typedef detail::BitsOf<T> U;
  if (!detail::IsNonFetchAmo(amoType)) {
    detail::SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
    return;
  }
  if (detail::ViaProxy(st, pe)) {
    detail::ProxyAmo(MORI_SHMEM_PROXY_ARGS(st), dest, sizeof(T), detail::BitCast<U>(static_cast<T>(val)), amoType, pe);
    return;
  }
  U* p = reinterpret_cast<U*>(detail::PeerWord(st, dest, sizeof(T), pe));
  if (p == nullptr) return;
  detail::AmoNonFetchBits<U>(p, detail::BitCast<U>(static_cast<T>(val)), amoType);
}

// amoType: AMO_FETCH (val, compare ignored), AMO_FETCH_INC (val ignored), AMO_FETCH_ADD,
// AMO_FETCH_AND, AMO_FETCH_OR, AMO_FETCH_XOR, AMO_SWAP, AMO_COMPARE_SWAP (stores val where the old
// value == compare). compare is ignored except by COMPARE_SWAP. Returns the old value.
template <typename T>
__device__ __forceinline__ T ShmemAtomicTypeFetchThread(const ShmemDeviceState& st, T* dest, detail::NoDeduce<T> val,
                                                        detail::NoDeduce<T> compare, int amoType, int pe,
                                                        int qpId = 0) {
  detail::CheckAmoType<T>();
  (void)qpId;
  typedef detail::BitsOf<T> U;
  if (!detail::IsFetchAmo(amoType)) {
    detail::SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
    return T(0);
  }
  if (detail::ViaProxy(st, pe)) {
    return detail::BitCast<T>(static_cast<U>(
        detail::ProxyAmoFetch(MORI_SHMEM_PROXY_ARGS(st), dest, sizeof(T), detail::BitCast<U>(static_cast<T>(val)),
                              detail::BitCast<U>(static_cast<T>(compare)), amoType, pe)));
  }
  U* p = reinterpret_cast<U*>(detail::PeerWord(st, dest, sizeof(T), pe));
  if (p == nullptr) return T(0);
  return detail::BitCast<T>(detail::AmoFetchBits<U>(p, detail::BitCast<U>(static_cast<T>(val)),
                                                    detail::BitCast<U>(static_cast<T>(compare)), amoType));
}

template <typename T>
__device__ __forceinline__ void ShmemAtomicTypeNonFetchWarp(const ShmemDeviceState& st, T* dest,
                                                            detail::NoDeduce<T> val, int amoType, int pe,
                                                            int qpId = 0) {
  if (detail::LaneId() == 0) ShmemAtomicTypeNonFetchThread<T>(st, dest, val, amoType, pe, qpId);
}

template <typename T>
__device__ __forceinline__ T ShmemAtomicTypeFetchWarp(const ShmemDeviceState& st, T* dest, detail::NoDeduce<T> val,
                                                      detail::NoDeduce<T> compare, int amoType, int pe, int qpId = 0) {
  typedef detail::BitsOf<T> U;
  U old = 0;
  if (detail::LaneId() == 0) {
    old = detail::BitCast<U>(ShmemAtomicTypeFetchThread<T>(st, dest, val, compare, amoType, pe, qpId));
  }
  return detail::BitCast<T>(static_cast<U>(__shfl_sync(0xffffffffu, old, 0)));
}

template <typename T>
__device__ __forceinline__ void ShmemAtomicTypeNonFetchThread(T* dest, detail::NoDeduce<T> val, int amoType, int pe,
                                                              int qpId = 0) {
  ShmemAtomicTypeNonFetchThread<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, amoType, pe, qpId);
}
template <typename T>
__device__ __forceinline__ void ShmemAtomicTypeNonFetchWarp(T* dest, detail::NoDeduce<T> val, int amoType, int pe,
                                                            int qpId = 0) {
  ShmemAtomicTypeNonFetchWarp<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, amoType, pe, qpId);
}
template <typename T>
__device__ __forceinline__ T ShmemAtomicTypeFetchThread(T* dest, detail::NoDeduce<T> val, detail::NoDeduce<T> compare,
                                                        int amoType, int pe, int qpId = 0) {
  return ShmemAtomicTypeFetchThread<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, compare, amoType, pe, qpId);
}
template <typename T>
__device__ __forceinline__ T ShmemAtomicTypeFetchWarp(T* dest, detail::NoDeduce<T> val, detail::NoDeduce<T> compare,
                                                      int amoType, int pe, int qpId = 0) {
  return ShmemAtomicTypeFetchWarp<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, compare, amoType, pe, qpId);
}

// ---- MORI's named families, per type and scope -----------------------------------------------
// ShmemAtomic{Type}NonFetch{Scope}(dest, val, amoType, pe[, qpId])
// ShmemAtomic{Type}Fetch{Scope}(dest, val, compare, amoType, pe[, qpId]) -> T
// Shmem{Type}AtomicAdd{Scope}(dest, val, pe[, qpId])            = NonFetch AMO_ADD
// Shmem{Type}AtomicFetchAdd{Scope}(dest, val, pe[, qpId]) -> T  = Fetch AMO_FETCH_ADD
// Types: Uint32, Int32, Uint64 (unsigned long long), Int64 (long long), Ulong, Long.


#define MORI_SHMEM_DEFINE_NAMED_AMO_SCOPE_(TypeName, T, Scope)                                                       \
  __device__ __forceinline__ void ShmemAtomic##TypeName##NonFetch##Scope(const ShmemDeviceState& st, T* dest, T val, \
                                                                         int amoType, int pe, int qpId = 0) {        \
    ShmemAtomicTypeNonFetch##Scope<T>(st, dest, val, amoType, pe, qpId);                                             \
  }                                                                                                                  \
  __device__ __forceinline__ void ShmemAtomic##TypeName##NonFetch##Scope(T* dest, T val, int amoType, int pe,        \
                                                                         int qpId = 0) {                             \
    ShmemAtomicTypeNonFetch##Scope<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, amoType, pe, qpId);                        \
  }                                                                                                                  \
  __device__ __forceinline__ T ShmemAtomic##TypeName##Fetch##Scope(const ShmemDeviceState& st, T* dest, T val,       \
                                                                   T compare, int amoType, int pe, int qpId = 0) {   \
    return ShmemAtomicTypeFetch##Scope<T>(st, dest, val, compare, amoType, pe, qpId);                                \
  }                                                                                                                  \
  __device__ __forceinline__ T ShmemAtomic##TypeName##Fetch##Scope(T* dest, T val, T compare, int amoType, int pe,   \
                                                                   int qpId = 0) {                                   \
    return ShmemAtomicTypeFetch##Scope<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, compare, amoType, pe, qpId);           \
  }                                                                                                                  \
  __device__ __forceinline__ void Shmem##TypeName##AtomicAdd##Scope(const ShmemDeviceState& st, T* dest, T val,      \
                                                                    int pe, int qpId = 0) {                          \
    ShmemAtomicTypeNonFetch##Scope<T>(st, dest, val, core::AMO_ADD, pe, qpId);                                       \
  }                                                                                                                  \
  __device__ __forceinline__ void Shmem##TypeName##AtomicAdd##Scope(T* dest, T val, int pe, int qpId = 0) {          \
    ShmemAtomicTypeNonFetch##Scope<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, core::AMO_ADD, pe, qpId);                  \
  }                                                                                                                  \
  __device__ __forceinline__ T Shmem##TypeName##AtomicFetchAdd##Scope(const ShmemDeviceState& st, T* dest, T val,    \
                                                                      int pe, int qpId = 0) {                        \
    return ShmemAtomicTypeFetch##Scope<T>(st, dest, val, static_cast<T>(0), core::AMO_FETCH_ADD, pe, qpId);                       \
  }                                                                                                                  \
  __device__ __forceinline__ T Shmem##TypeName##AtomicFetchAdd##Scope(T* dest, T val, int pe, int qpId = 0) {        \
    return ShmemAtomicTypeFetch##Scope<T>(MORI_SHMEM_GLOBAL_STATE, dest, val, static_cast<T>(0), core::AMO_FETCH_ADD, pe, qpId);  \
  }
#define MORI_SHMEM_DEFINE_NAMED_AMO_(TypeName, T)         \
  MORI_SHMEM_DEFINE_NAMED_AMO_SCOPE_(TypeName, T, Thread) \
  MORI_SHMEM_DEFINE_NAMED_AMO_SCOPE_(TypeName, T, Warp)

MORI_SHMEM_FOR_EACH_WORD_TYPE(MORI_SHMEM_DEFINE_NAMED_AMO_)
#undef MORI_SHMEM_DEFINE_NAMED_AMO_
#undef MORI_SHMEM_DEFINE_NAMED_AMO_SCOPE_

}  // namespace mori::shmem
