// SPDX-License-Identifier: MIT
// LsaBarrierSession: a barrier among the LSA team (MORI's ccoLsaBarrierSession), for one scope.
//
// Barrier `index` owns barrier_epoch[index] (this rank's last completed epoch) and the row
// barrier_inbox[index][*] of every member's resource window. Arriving at epoch e stores e into
// inbox[index][my lsa_rank] of every member (itself included); waiting spins until every entry of
// the local row is >= e. Epochs are monotonic uint64 and the inbox is never reset, so a barrier
// needs no clean-up between uses, and a fast peer that already arrived at e + 1 still satisfies a
// wait for e. The same index must be used by the same number of sessions/syncs on every member,
// and by one scope at a time on each.
//
// Only coop thread 0 writes the epoch back (when the session ends); every member thread reads it
// when the session starts, and the syncs around keep those apart.
#pragma once

#include <mori_shmem/device/ptx.cuh>

#include "../dev_comm.h"
#include "coop.cuh"
#include "lsa.cuh"
#include "wait.cuh"

namespace mori::cco::device {

template <typename Coop>
class LsaBarrierSession {
 public:
  __device__ __forceinline__ LsaBarrierSession(Coop coop, const mori_cco_dev_comm_t& comm, unsigned index)
      : coop_(coop),
        comm_(comm),
        index_(index),
        epoch_(*reinterpret_cast<volatile word_t*>(barrier_epoch_word(comm, index))),
        start_epoch_(epoch_) {}

  __device__ __forceinline__ ~LsaBarrierSession() {
    if (epoch_ == start_epoch_) return;  // every member took the same path: no arrive, no write
    if (coop_.thread_rank() == 0) *barrier_epoch_word(comm_, index_) = epoch_;
    coop_.sync();  // a next session on this index, in this scope, reads the epoch only after this
  }

  LsaBarrierSession(const LsaBarrierSession&) = delete;
  LsaBarrierSession& operator=(const LsaBarrierSession&) = delete;

  // Tells every member that this scope reached the next epoch. The sync puts the whole scope's
  // earlier accesses before the fence of each storing thread, and that fence (cumulative) before
  // the peer's view of the store: whoever sees the epoch sees the data written before arrive().
  __device__ __forceinline__ void arrive() {
    ++epoch_;
    coop_.sync();
    for (int peer = coop_.thread_rank(); peer < comm_.lsa_size; peer += coop_.size()) {
      mori::shmem::detail::FenceAcqRelSys();
      mori::shmem::detail::StRelaxedSys(barrier_inbox_word(comm_, peer, index_, comm_.lsa_rank), epoch_);
    }
  }

  // Waits until every member arrived at this session's epoch. False on every thread of the scope
  // when the wait expired (MORI_CCO_ERR_BARRIER_TIMEOUT is then in the error word) or an earlier
  // error is pending; the barrier is then unusable until the communicator is rebuilt.
  __device__ __forceinline__ bool wait() {
    bool failed = false;
    for (int peer = coop_.thread_rank(); peer < comm_.lsa_size; peer += coop_.size()) {
      if (!failed) {
        failed = !wait_at_least(comm_, barrier_inbox_word(comm_, comm_.lsa_rank, index_, peer), epoch_,
                                MORI_CCO_ERR_BARRIER_TIMEOUT);
      }
    }
    // The sync also hands the acquires of the waiting threads on to the rest of the scope.
    return !coop_.any(failed);
  }

  __device__ __forceinline__ bool sync() {
    arrive();
    return wait();
  }

  __device__ __forceinline__ word_t epoch() const { return epoch_; }

 private:
  Coop coop_;
  const mori_cco_dev_comm_t& comm_;
  unsigned index_;
  word_t epoch_;
  word_t start_epoch_;
};

}  // namespace mori::cco::device
