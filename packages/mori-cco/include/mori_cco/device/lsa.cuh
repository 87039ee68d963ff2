// SPDX-License-Identifier: MIT
// Load/store (LSA) addressing through the flat VA: LSA rank j's slot starts at
// flat_base + j * per_rank_size in every member's address space, and an allocation sits at the same
// offset in every slot, so a peer's address is one multiply-add on values in the by-value dev comm
// (the kernel's constant bank): no table, no dereference.
//
// Resource words (dev_comm.h) are returned as unsigned long long*, the type the PTX helpers and
// the CUDA atomics take (uint64_t is unsigned long on LP64 hosts, a distinct type).
#pragma once

#include "../dev_comm.h"

namespace mori::cco::device {

using word_t = unsigned long long;

__device__ __forceinline__ unsigned long long slot_base(const mori_cco_dev_comm_t& comm, int peer_lsa_rank) {
  return comm.flat_base + static_cast<unsigned long long>(peer_lsa_rank) * comm.per_rank_size;
}

// Peer `peer_lsa_rank`'s copy of byte `offset` of `window`.
__device__ __forceinline__ void* lsa_ptr(const mori_cco_dev_comm_t& comm, mori_cco_window_t window,
                                         int peer_lsa_rank, unsigned long long offset) {
  return reinterpret_cast<void*>(slot_base(comm, peer_lsa_rank) + window.offset + offset);
}

__device__ __forceinline__ void* local_ptr(const mori_cco_dev_comm_t& comm, mori_cco_window_t window,
                                           unsigned long long offset) {
  return lsa_ptr(comm, window, comm.lsa_rank, offset);
}

// Peer `peer_lsa_rank`'s copy of a local flat-VA address.
template <typename T>
__device__ __forceinline__ T* peer_ptr(const mori_cco_dev_comm_t& comm, T* local, int peer_lsa_rank) {
  const long long delta = static_cast<long long>(peer_lsa_rank - comm.lsa_rank) *
                          static_cast<long long>(comm.per_rank_size);
  return reinterpret_cast<T*>(reinterpret_cast<char*>(local) + delta);
}

// ---- resource words ------------------------------------------------------------------------

__device__ __forceinline__ word_t* resource_word(const mori_cco_dev_comm_t& comm, int peer_lsa_rank,
                                                 unsigned long long offset, unsigned long long index) {
  return reinterpret_cast<word_t*>(slot_base(comm, peer_lsa_rank) + comm.resource.offset + offset) + index;
}

// This rank's last completed epoch of LSA barrier `index`.
__device__ __forceinline__ word_t* barrier_epoch_word(const mori_cco_dev_comm_t& comm, unsigned index) {
  return resource_word(comm, comm.lsa_rank, comm.barrier_epoch_offset, index);
}

// inbox[index][from] of LSA rank `owner`: the epoch of barrier `index` that LSA rank `from` reached.
__device__ __forceinline__ word_t* barrier_inbox_word(const mori_cco_dev_comm_t& comm, int owner, unsigned index,
                                                      int from) {
  return resource_word(comm, owner, comm.barrier_inbox_offset,
                       static_cast<unsigned long long>(index) * comm.lsa_size + from);
}

__device__ __forceinline__ word_t* signal_word(const mori_cco_dev_comm_t& comm, int peer_lsa_rank, unsigned id) {
  return resource_word(comm, peer_lsa_rank, comm.signal_offset, id);
}

__device__ __forceinline__ word_t* counter_word(const mori_cco_dev_comm_t& comm, unsigned id) {
  return resource_word(comm, comm.lsa_rank, comm.counter_offset, id);
}

// ce_signals[src][queue] of LSA rank `owner`: bumped after each copy-engine put from `src`.
__device__ __forceinline__ word_t* ce_signal_word(const mori_cco_dev_comm_t& comm, int owner, int src,
                                                  unsigned queue) {
  return resource_word(comm, owner, comm.ce_signal_offset,
                       static_cast<unsigned long long>(src) * comm.ce_queue_count + queue);
}

__device__ __forceinline__ word_t* error_word(const mori_cco_dev_comm_t& comm) {
  return resource_word(comm, comm.lsa_rank, comm.error_offset, 0);
}

}  // namespace mori::cco::device
