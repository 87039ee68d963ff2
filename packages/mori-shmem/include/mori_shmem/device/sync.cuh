// SPDX-License-Identifier: MIT
// Point-to-point synchronisation on local words (wait_until / test) and the device barrier.
//
// Waits read with ld.acquire.sys: once a wait sees a value that a peer stored with a release
// (put-with-signal, SIGNAL_SET/ADD, the barrier's arrive) or after a fence, everything that peer
// wrote before is visible to the waiting thread. Share it with the rest of the group with a
// group barrier (__syncthreads) after the wait.
//
// Every spin is bounded. When the state's spin_timeout_ns is non-zero and that much time has
// passed (%globaltimer), the wait records MORI_SHMEM_DEVICE_ERR_WAIT_TIMEOUT in the PE's error
// word (first error wins) and returns the last value it saw, which does not satisfy the condition.
// While timeouts are on, a wait also gives up at its next clock check once the error word is
// non-zero for any reason, so a dead peer costs one timeout per kernel rather than one per wait;
// the host clears the word when it reports the error.
#pragma once

#include "codes.cuh"
#include "copy.cuh"
#include "fence.cuh"
#include "ptx.cuh"
#include "state.cuh"
#include "traits.cuh"

namespace mori::shmem {
namespace detail {

// Spins between clock checks: the check is cheap next to an acquire load at system scope, but
// there is no need to read the clock on every turn.
constexpr unsigned int kSpinsPerClockCheck = 16;
// After this long a wait is no longer latency-critical; it naps between loads to leave memory
// bandwidth and issue slots to the work it is waiting for.
constexpr unsigned long long kNapAfterNs = 100000;  // 100 us
constexpr unsigned int kNapNs = 256;

template <typename T>
__device__ __forceinline__ T LoadAcquire(const T* p) {
  if constexpr (sizeof(T) == 4) {
    return BitCast<T>(LdAcquireSys(reinterpret_cast<const unsigned int*>(p)));
  } else {
    return BitCast<T>(LdAcquireSys(reinterpret_cast<const unsigned long long*>(p)));
  }
}

__device__ __forceinline__ bool IsCmp(int cmp) { return cmp >= SHMEM_CMP_EQ && cmp <= SHMEM_CMP_GE; }

template <typename T>
__device__ __forceinline__ bool Compare(T v, int cmp, T ref) {
  switch (cmp) {
    case SHMEM_CMP_EQ:
      return v == ref;
    case SHMEM_CMP_NE:
      return v != ref;
    case SHMEM_CMP_GT:
      return v > ref;
    case SHMEM_CMP_LE:
      return v <= ref;
    case SHMEM_CMP_LT:
      return v < ref;
    default:  // SHMEM_CMP_GE (the caller checked the code)
      return v >= ref;
  }
}

template <typename T>
__device__ __forceinline__ bool CheckWaitArgs(const ShmemDeviceState& st, const T* ivar, int cmp) {
  static_assert(IsWordInt<T>::value, "waits take a 4- or 8-byte integer type");
  if (!IsCmp(cmp)) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
    return false;
  }
  if ((reinterpret_cast<unsigned long long>(ivar) & (sizeof(T) - 1)) != 0) {
    SetError(st, MORI_SHMEM_DEVICE_ERR_BAD_ADDRESS);
    return false;
  }
  return true;
}

}  // namespace detail

// Waits until (*ivar cmp value) holds and returns the value that satisfied it. ivar is a LOCAL
// address (this PE's symmetric word, or any local global memory that peers write); cmp is a
// ShmemCmpType. On timeout (see above) returns the last value seen; on a bad cmp code or a
// misaligned ivar records ERR_INVALID_ARGUMENT / ERR_BAD_ADDRESS and returns 0 at once.
template <typename T>
__device__ __forceinline__ T ShmemWaitUntil(const ShmemDeviceState& st, T* ivar, int cmp, detail::NoDeduce<T> value) {
  if (!detail::CheckWaitArgs(st, ivar, cmp)) return T(0);
  const T ref = value;
  T v = detail::LoadAcquire<T>(ivar);
  if (detail::Compare<T>(v, cmp, ref)) return v;
  const unsigned long long start = detail::GlobalTimerNs();
  for (unsigned int spin = 1;; ++spin) {
    v = detail::LoadAcquire<T>(ivar);
    if (detail::Compare<T>(v, cmp, ref)) return v;
    if (spin % detail::kSpinsPerClockCheck == 0) {
      const unsigned long long waited = detail::GlobalTimerNs() - start;
      if (st.spin_timeout_ns != 0) {
        if (waited >= st.spin_timeout_ns) {
          detail::SetError(st, MORI_SHMEM_DEVICE_ERR_WAIT_TIMEOUT);
          return v;
        }
        if (st.heap_base != 0 && detail::LdRelaxedSys(detail::ErrorWord(st)) != 0) return v;
      }
      if (waited >= detail::kNapAfterNs) __nanosleep(detail::kNapNs);
    }
  }
}

// One acquire load: whether (*ivar cmp value) holds now. A bad cmp code or misaligned ivar
// records the error and returns false.
template <typename T>
__device__ __forceinline__ bool ShmemTest(const ShmemDeviceState& st, T* ivar, int cmp, detail::NoDeduce<T> value) {
  if (!detail::CheckWaitArgs(st, ivar, cmp)) return false;
  return detail::Compare<T>(detail::LoadAcquire<T>(ivar), cmp, static_cast<T>(value));
}

template <typename T>
__device__ __forceinline__ T ShmemWaitUntil(T* ivar, int cmp, detail::NoDeduce<T> value) {
  return ShmemWaitUntil<T>(MORI_SHMEM_GLOBAL_STATE, ivar, cmp, value);
}
template <typename T>
__device__ __forceinline__ bool ShmemTest(T* ivar, int cmp, detail::NoDeduce<T> value) {
  return ShmemTest<T>(MORI_SHMEM_GLOBAL_STATE, ivar, cmp, value);
}

// MORI's named waits: Shmem{Type}WaitUntilGreaterThan(addr, val) -> the value seen (> val),
// Shmem{Type}WaitUntilEquals(addr, val) -> the value seen (== val, unless the wait timed out).

#define MORI_SHMEM_DEFINE_NAMED_WAIT_(TypeName, T)                                                             \
  __device__ __forceinline__ T Shmem##TypeName##WaitUntilGreaterThan(const ShmemDeviceState& st, T* addr,     \
                                                                     T val) {                                 \
    return ShmemWaitUntil<T>(st, addr, SHMEM_CMP_GT, val);                                                     \
  }                                                                                                            \
  __device__ __forceinline__ T Shmem##TypeName##WaitUntilGreaterThan(T* addr, T val) {                         \
    return ShmemWaitUntil<T>(MORI_SHMEM_GLOBAL_STATE, addr, SHMEM_CMP_GT, val);                                \
  }                                                                                                            \
  __device__ __forceinline__ T Shmem##TypeName##WaitUntilEquals(const ShmemDeviceState& st, T* addr, T val) { \
    return ShmemWaitUntil<T>(st, addr, SHMEM_CMP_EQ, val);                                                     \
  }                                                                                                            \
  __device__ __forceinline__ T Shmem##TypeName##WaitUntilEquals(T* addr, T val) {                              \
    return ShmemWaitUntil<T>(MORI_SHMEM_GLOBAL_STATE, addr, SHMEM_CMP_EQ, val);                                \
  }

MORI_SHMEM_FOR_EACH_WORD_TYPE(MORI_SHMEM_DEFINE_NAMED_WAIT_)
#undef MORI_SHMEM_DEFINE_NAMED_WAIT_

// ---- device barrier across all PEs -----------------------------------------------------------
//
// No central PE: each PE announces its arrival to every PE and waits for every PE's arrival.
//   1. quiet (fence.sc.sys): this thread's earlier puts, gets and AMOs are complete;
//   2. epoch = ++(this PE's barrier epoch word): the number of device barriers this PE has
//      entered; every PE enters the same sequence of barriers, so the epochs agree;
//   3. for every PE p: store epoch into p's arrive[my_pe] (relaxed, system scope; the fence of
//      step 1 before it makes each store a release);
//   4. for every PE p: acquire-wait until this PE's arrive[p] >= epoch. ">=" because a fast PE
//      may already have left this barrier and announced the next one; it cannot get further,
//      since the next barrier waits for us.
// After it returns, everything any PE did before entering (for a block: any thread of the block)
// is visible to the caller. Rules:
//   - one device barrier per PE in flight at a time: one thread (or one block) per PE calls it,
//     and every PE calls it the same number of times;
//   - n_pes <= MORI_SHMEM_DEVICE_BARRIER_MAX_PES (the arrive words live in the heap's reserved
//     sync area); a larger job records ERR_INVALID_ARGUMENT and returns;
//   - the host zeroes the sync words at init (and they are never reset), so epochs start at 1;
//   - every PE must be reachable (load/store, or through the device proxy), else
//     ERR_UNREACHABLE_PE before anything is stored;
//   - a waiting step that times out records ERR_WAIT_TIMEOUT and the barrier returns at once.
// Only the calling thread / block synchronises: other blocks of the same kernel are not covered.

__device__ __forceinline__ void ShmemBarrierAllThread(const ShmemDeviceState& st) {
  const int npes = st.n_pes;
  if (st.heap_base == 0 || npes <= 0) return;  // a never-filled state has no peers to meet
  if (npes > static_cast<int>(MORI_SHMEM_DEVICE_BARRIER_MAX_PES) ||
      static_cast<unsigned int>(st.my_pe) >= static_cast<unsigned int>(npes)) {
    detail::SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
    return;
  }
  for (int p = 0; p < npes; ++p) {
    if (detail::PeerBase(st, p) == 0 && !detail::ViaProxy(st, p)) {
      detail::SetError(st, MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE);
      return;
    }
  }
  ShmemQuietThread(st);

  // Only this thread touches the epoch word while the barrier runs (one barrier in flight); the
  // volatile access keeps the compiler from caching it across barriers.
  volatile unsigned long long* epochWord =
      reinterpret_cast<volatile unsigned long long*>(st.heap_base + MORI_SHMEM_SYNC_BARRIER_EPOCH_OFFSET);
  const unsigned long long epoch = *epochWord + 1;
  *epochWord = epoch;

  const unsigned long long myArrive = MORI_SHMEM_SYNC_ARRIVE_OFFSET + 8ull * static_cast<unsigned int>(st.my_pe);
  for (int p = 0; p < npes; ++p) {
    if (detail::ViaProxy(st, p)) {
      detail::ProxyAmo(MORI_SHMEM_PROXY_ARGS(st), reinterpret_cast<const void*>(st.heap_base + myArrive), 8, epoch, core::SIGNAL_SET, p);
    } else {
      detail::StRelaxedSys(reinterpret_cast<unsigned long long*>(detail::PeerBase(st, p) + myArrive), epoch);
    }
  }
  unsigned long long* arrive = reinterpret_cast<unsigned long long*>(st.heap_base + MORI_SHMEM_SYNC_ARRIVE_OFFSET);
  for (int p = 0; p < npes; ++p) {
    if (ShmemWaitUntil<unsigned long long>(st, arrive + p, SHMEM_CMP_GE, epoch) < epoch) return;  // timed out
  }
}

// The whole block calls it; thread 0 runs the barrier for the block. The leading __syncthreads
// puts every thread's earlier accesses before thread 0's quiet, the trailing one shares thread
// 0's acquires with the block.
__device__ __forceinline__ void ShmemBarrierAllBlock(const ShmemDeviceState& st) {
  __syncthreads();
  if (detail::BlockGroup::Rank() == 0) ShmemBarrierAllThread(st);
  __syncthreads();
}

__device__ __forceinline__ void ShmemBarrierAllThread() { ShmemBarrierAllThread(MORI_SHMEM_GLOBAL_STATE); }
__device__ __forceinline__ void ShmemBarrierAllBlock() { ShmemBarrierAllBlock(MORI_SHMEM_GLOBAL_STATE); }

}  // namespace mori::shmem
