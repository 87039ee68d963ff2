// SPDX-License-Identifier: MIT
// One-sided LSA data movement with completion words (MORI's Gda/Sdma put/signal/counter calls,
// served here by load/store through the flat VA):
//   signals     resource words peers add to (a put's "data has landed" flag), waited on locally;
//   counters    local completion words this rank adds to itself;
//   ce_signals  words the copy engine bumps after each put from LSA rank src on a queue.
// Every word is monotonic and never reset, so waits are "until >= least".
#pragma once

#include <mori_shmem/device/copy.cuh>
#include <mori_shmem/device/ptx.cuh>

#include "../dev_comm.h"
#include "coop.cuh"
#include "lsa.cuh"
#include "wait.cuh"

namespace mori::cco::device {

// ---- signals -------------------------------------------------------------------------------

// Adds `value` to signal `id` of LSA rank `peer_lsa`. A release: the caller's earlier writes are
// visible to whoever observes the new value (the add itself is one system-scope atomic).
__device__ __forceinline__ void signal_add(const mori_cco_dev_comm_t& comm, int peer_lsa, unsigned id,
                                           word_t value) {
  mori::shmem::detail::RedAddReleaseSys(signal_word(comm, peer_lsa, id), value);
}

// Stores `value` into signal `id` of LSA rank `peer_lsa`, with release semantics. Keep values
// monotonic: waits compare with >=.
__device__ __forceinline__ void signal_set(const mori_cco_dev_comm_t& comm, int peer_lsa, unsigned id,
                                           word_t value) {
  mori::shmem::detail::StReleaseSys(signal_word(comm, peer_lsa, id), value);
}

__device__ __forceinline__ word_t read_signal(const mori_cco_dev_comm_t& comm, unsigned id) {
  return mori::shmem::detail::LdAcquireSys(signal_word(comm, comm.lsa_rank, id));
}

// Waits until local signal `id` >= least; false (MORI_CCO_ERR_SIGNAL_TIMEOUT recorded) on expiry.
__device__ __forceinline__ bool wait_signal(const mori_cco_dev_comm_t& comm, unsigned id, word_t least) {
  return wait_at_least(comm, signal_word(comm, comm.lsa_rank, id), least, MORI_CCO_ERR_SIGNAL_TIMEOUT);
}

// ---- puts and gets -------------------------------------------------------------------------

// Copies `bytes` from local memory `src` to byte `dst_off` of LSA rank `peer_lsa`'s `dst_window`,
// shared by the scope's threads (16-byte vectors where the addresses allow). Weak stores: nothing
// is ordered until a fence, a signal or a barrier.
template <typename Coop>
__device__ __forceinline__ void put(Coop coop, const mori_cco_dev_comm_t& comm, int peer_lsa,
                                    mori_cco_window_t dst_window, unsigned long long dst_off, const void* src,
                                    unsigned long long bytes) {
  mori::shmem::detail::CopyBytes<8>(lsa_ptr(comm, dst_window, peer_lsa, dst_off), src, bytes, coop.thread_rank(),
                                    coop.size());
}

// put, then signal_add(id, value) on the same peer once every thread's stores are visible before
// it: the scope syncs, and one thread fences at system scope (cumulative over the scope's stores
// by the sync) and adds.
template <typename Coop>
__device__ __forceinline__ void put_signal(Coop coop, const mori_cco_dev_comm_t& comm, int peer_lsa,
                                           mori_cco_window_t dst_window, unsigned long long dst_off,
                                           const void* src, unsigned long long bytes, unsigned id, word_t value) {
  put(coop, comm, peer_lsa, dst_window, dst_off, src, bytes);
  coop.sync();
  if (coop.thread_rank() == 0) {
    __threadfence_system();
    signal_add(comm, peer_lsa, id, value);
  }
}

// Copies `bytes` from byte `src_off` of LSA rank `peer_lsa`'s `src_window` to local memory `dst`.
// Complete for the calling thread when it returns (loads); sync the scope before others use it.
template <typename Coop>
__device__ __forceinline__ void get(Coop coop, const mori_cco_dev_comm_t& comm, int peer_lsa,
                                    mori_cco_window_t src_window, unsigned long long src_off, void* dst,
                                    unsigned long long bytes) {
  mori::shmem::detail::CopyBytes<8>(dst, lsa_ptr(comm, src_window, peer_lsa, src_off), bytes, coop.thread_rank(),
                                    coop.size());
}

// ---- counters (local) ----------------------------------------------------------------------

__device__ __forceinline__ void counter_add(const mori_cco_dev_comm_t& comm, unsigned id, word_t value) {
  mori::shmem::detail::RedAddReleaseSys(counter_word(comm, id), value);
}

__device__ __forceinline__ word_t read_counter(const mori_cco_dev_comm_t& comm, unsigned id) {
  return mori::shmem::detail::LdAcquireSys(counter_word(comm, id));
}

__device__ __forceinline__ bool wait_counter(const mori_cco_dev_comm_t& comm, unsigned id, word_t least) {
  return wait_at_least(comm, counter_word(comm, id), least, MORI_CCO_ERR_SIGNAL_TIMEOUT);
}

// ---- copy-engine signals -------------------------------------------------------------------

// Waits until the copy engine completed `expected` puts (in total, ever) from LSA rank `src_lsa`
// on `queue` toward this rank; the acquire makes their data visible.
__device__ __forceinline__ bool ce_wait_signal(const mori_cco_dev_comm_t& comm, int src_lsa, unsigned queue,
                                               word_t expected) {
  return wait_at_least(comm, ce_signal_word(comm, comm.lsa_rank, src_lsa, queue), expected,
                       MORI_CCO_ERR_SIGNAL_TIMEOUT);
}

}  // namespace mori::cco::device
