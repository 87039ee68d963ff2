// SPDX-License-Identifier: MIT
// GDA: one-sided calls that name any world rank. A rank of this node is reached by load/store
// (the LSA calls of signal.cuh); a rank of another node through the communicator's device proxy
// (comm.gda_ring): one thread of the scope posts one request for the scope's whole range into the
// ring in pinned host memory, and the proxy thread of this rank carries it out over mori-shmem's
// remote transport (the request format and the posting code are mori-shmem's, device/proxy.cuh).
//
// Semantics, as NVSHMEM's proxy path and MORI's GDA calls:
//   - gda_put / gda_put_signal return once the proxy has taken the source bytes (src may be
//     reused); the data is at the peer after gda_flush, or once the peer observes the signal.
//   - gda_put_signal: the peer's signal `id` gets += value after the data has landed.
//   - gda_get returns with the bytes in local memory; gda_flush returns once every earlier GDA
//     request of this rank is applied at its target; gda_counter then bumps a local counter.
//   - gda_put_value stores up to 8 bytes without a source buffer.
//   - Waiting for a remote signal is the local wait_signal of signal.cuh.
// A failed request (a lost peer) still completes, so no kernel waits forever: the proxy records a
// mori-shmem device error, which check_device_error reports as MORI_CCO_ERR_GDA.
#pragma once

#include <mori_shmem/device/proxy.cuh>

#include "../dev_comm.h"
#include "coop.cuh"
#include "lsa.cuh"
#include "signal.cuh"
#include "wait.cuh"

namespace mori::cco::device {

namespace gda_detail {

namespace shm = mori::shmem::detail;

// The proxy words sit at gda_words_offset of this rank's slot, laid out as mori-shmem's heap sync
// words, so they stand in for the heap base of shmem's proxy code.
__device__ __forceinline__ shm::ProxyCtx proxy_ctx(const mori_cco_dev_comm_t& comm) {
  return shm::ProxyCtx{comm.gda_ring, slot_base(comm, comm.lsa_rank) + comm.gda_words_offset, 0,
                       comm.spin_timeout_ns};
}

// The LSA rank of world rank `peer` when it shares this node, else -1; -2 (MORI_CCO_ERR_BAD_PEER
// recorded) when it is no rank, or is on another node and there is no proxy to reach it.
__device__ __forceinline__ int route(const mori_cco_dev_comm_t& comm, int peer) {
  if (peer < 0 || peer >= comm.world_size) {
    record_error(comm, MORI_CCO_ERR_BAD_PEER);
    return -2;
  }
  const int lsa = peer - comm.node_start;
  if (lsa >= 0 && lsa < comm.lsa_size) return lsa;
  if (comm.gda_ring == 0) {
    record_error(comm, MORI_CCO_ERR_BAD_PEER);
    return -2;
  }
  return -1;
}

__device__ __forceinline__ unsigned long long signal_offset(const mori_cco_dev_comm_t& comm, unsigned id) {
  return comm.resource.offset + comm.signal_offset + 8ull * id;
}

// One thread posts `op` and waits until the proxy carried it out (done moved past its ticket).
__device__ __forceinline__ void post_and_wait(const mori_cco_dev_comm_t& comm, unsigned op, int peer,
                                              unsigned long long local, unsigned long long offset,
                                              unsigned long long bytes, unsigned long long value,
                                              unsigned long long signal_offset) {
  const shm::ProxyCtx ctx = proxy_ctx(comm);
  shm::ProxyWaitDone(ctx, shm::ProxyPost(ctx, op, peer, mori::core::SIGNAL_ADD, 0, local, offset, bytes, value, 0,
                                         signal_offset));
}

}  // namespace gda_detail

// Copies `bytes` from byte `src_off` of this rank's `src_window` to byte `dst_off` of world rank
// `peer`'s `dst_window`, shared by the scope's threads.
template <typename Coop>
__device__ __forceinline__ void gda_put(Coop coop, const mori_cco_dev_comm_t& comm, int peer,
                                        mori_cco_window_t dst_window, unsigned long long dst_off,
                                        mori_cco_window_t src_window, unsigned long long src_off,
                                        unsigned long long bytes) {
  const int lsa = gda_detail::route(comm, peer);
  if (lsa >= 0) {
    put(coop, comm, lsa, dst_window, dst_off, local_ptr(comm, src_window, src_off), bytes);
    return;
  }
  coop.sync();  // the scope's writes of the source precede the request
  if (lsa == -1 && coop.thread_rank() == 0) {
    gda_detail::post_and_wait(comm, MORI_SHMEM_PROXY_PUT, peer,
                              reinterpret_cast<unsigned long long>(local_ptr(comm, src_window, src_off)),
                              dst_window.offset + dst_off, bytes, 0, 0);
  }
  coop.sync();
}

// gda_put, then world rank `peer`'s signal `id` gets += value once the data is there.
template <typename Coop>
__device__ __forceinline__ void gda_put_signal(Coop coop, const mori_cco_dev_comm_t& comm, int peer,
                                               mori_cco_window_t dst_window, unsigned long long dst_off,
                                               mori_cco_window_t src_window, unsigned long long src_off,
                                               unsigned long long bytes, unsigned id, word_t value) {
  const int lsa = gda_detail::route(comm, peer);
  if (lsa >= 0) {
    put_signal(coop, comm, lsa, dst_window, dst_off, local_ptr(comm, src_window, src_off), bytes, id, value);
    return;
  }
  coop.sync();
  if (lsa == -1 && coop.thread_rank() == 0) {
    gda_detail::post_and_wait(comm, MORI_SHMEM_PROXY_PUT_SIGNAL, peer,
                              reinterpret_cast<unsigned long long>(local_ptr(comm, src_window, src_off)),
                              dst_window.offset + dst_off, bytes, value, gda_detail::signal_offset(comm, id));
  }
  coop.sync();
}

// World rank `peer`'s signal `id` gets += value. One thread calls it. To a rank of another node
// it is not ordered after this rank's earlier puts (they may travel on other connections): use
// gda_put_signal, or gda_flush first, to tell a peer that data has landed.
__device__ __forceinline__ void gda_signal(const mori_cco_dev_comm_t& comm, int peer, unsigned id, word_t value) {
  const int lsa = gda_detail::route(comm, peer);
  if (lsa >= 0) {
    __threadfence_system();
    signal_add(comm, lsa, id, value);
  } else if (lsa == -1) {
    const gda_detail::shm::ProxyCtx ctx = gda_detail::proxy_ctx(comm);
    gda_detail::shm::ProxyPost(ctx, MORI_SHMEM_PROXY_SIGNAL, peer, mori::core::SIGNAL_ADD, 0, 0,
                               gda_detail::signal_offset(comm, id), 8, value, 0, 0);
  }
}

// Stores the low `bytes` (1, 2, 4 or 8, naturally aligned) bytes of `value` at byte `dst_off` of
// world rank `peer`'s `dst_window` (MORI's putValue). There is no source buffer, so it returns at
// once; it is at the peer after gda_flush. One thread calls it.
__device__ __forceinline__ void gda_put_value(const mori_cco_dev_comm_t& comm, int peer, mori_cco_window_t dst_window,
                                              unsigned long long dst_off, unsigned long long value, unsigned bytes) {
  if ((bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) || (dst_window.offset + dst_off) % bytes != 0) {
    record_error(comm, MORI_CCO_ERR_BAD_ARGUMENT);
    return;
  }
  const int lsa = gda_detail::route(comm, peer);
  if (lsa >= 0) {
    void* word = lsa_ptr(comm, dst_window, lsa, dst_off);
    switch (bytes) {
      case 1: *static_cast<volatile unsigned char*>(word) = static_cast<unsigned char>(value); break;
      case 2: *static_cast<volatile unsigned short*>(word) = static_cast<unsigned short>(value); break;
      case 4: *static_cast<volatile unsigned int*>(word) = static_cast<unsigned int>(value); break;
      default: *static_cast<volatile unsigned long long*>(word) = value; break;
    }
  } else if (lsa == -1) {
    const gda_detail::shm::ProxyCtx ctx = gda_detail::proxy_ctx(comm);
    gda_detail::shm::ProxyPost(ctx, MORI_SHMEM_PROXY_PUT_IMM, peer, 0, 0, 0, dst_window.offset + dst_off, bytes,
                               value, 0, 0);
  }
}

// Copies `bytes` from byte `src_off` of world rank `peer`'s `src_window` to local memory `dst`;
// complete for the whole scope when it returns.
template <typename Coop>
__device__ __forceinline__ void gda_get(Coop coop, const mori_cco_dev_comm_t& comm, int peer,
                                        mori_cco_window_t src_window, unsigned long long src_off, void* dst,
                                        unsigned long long bytes) {
  const int lsa = gda_detail::route(comm, peer);
  if (lsa >= 0) {
    get(coop, comm, lsa, src_window, src_off, dst, bytes);
    coop.sync();
    return;
  }
  coop.sync();
  if (lsa == -1 && coop.thread_rank() == 0) {
    gda_detail::post_and_wait(comm, MORI_SHMEM_PROXY_GET, peer, reinterpret_cast<unsigned long long>(dst),
                              src_window.offset + src_off, bytes, 0, 0);
    __threadfence();  // the proxy's copy landed before done moved; order it before the scope's reads
  }
  coop.sync();
}

// Every GDA request this rank posted before it is applied at its target (and every LSA store of
// the scope is visible system-wide).
template <typename Coop>
__device__ __forceinline__ void gda_flush(Coop coop, const mori_cco_dev_comm_t& comm) {
  coop.sync();
  if (coop.thread_rank() == 0) {
    __threadfence_system();
    if (comm.gda_ring != 0) gda_detail::post_and_wait(comm, MORI_SHMEM_PROXY_QUIET, comm.rank, 0, 0, 0, 0, 0);
  }
  coop.sync();
}

// MORI's GDA counter: once every GDA request this rank posted before it is complete at its
// target, local counter `id` gets += 1 (wait_counter / read_counter of signal.cuh).
template <typename Coop>
__device__ __forceinline__ void gda_counter(Coop coop, const mori_cco_dev_comm_t& comm, unsigned id) {
  gda_flush(coop, comm);
  if (coop.thread_rank() == 0) counter_add(comm, id, 1);
  coop.sync();
}

}  // namespace mori::cco::device
