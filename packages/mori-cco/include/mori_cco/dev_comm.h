/* SPDX-License-Identifier: MIT */
/*
 * The device communicator: what a kernel (or, on the cpu backend, a host thread) needs to reach
 * the communicator's memory. It is trivially copyable and passed by value, so on the GPU it lives
 * in the kernel's constant argument space and costs no dereference.
 *
 * Memory model ("flat VA"): every rank owns a slot of per_rank_size bytes. The slots of the ranks
 * that share load/store access (the LSA team: the ranks of one node) are mapped back to back in
 * every member's address space, starting at flat_base, in LSA-rank order. An allocation sits at
 * the same offset in every slot, so a peer's copy of a local address is
 *     local + (peer_lsa_rank - lsa_rank) * per_rank_size.
 * Windows name such a range by its offset inside the slot.
 *
 * The resource window holds the dev comm's synchronisation words, laid out as the *_offset
 * fields say (offsets inside the resource window, every word a uint64_t):
 *   barrier_epoch [lsa_barrier_count]            this rank's last completed epoch per barrier
 *   barrier_inbox [lsa_barrier_count][lsa_size]  epoch that LSA peer j reached, written by j
 *   signals       [signal_count]                 added to by peers (put with signal)
 *   counters      [counter_count]                local completion counters
 *   ce_signals    [lsa_size][ce_queue_count]     bumped after each copy-engine put from peer j
 *   error         one word; kernels store a MORI_CCO_ERR_* code when a bounded wait expires
 * Every counter is monotonic and never reset, so waits compare with ">=" (wrap-safe for 2^64).
 */
#ifndef MORI_CCO_DEV_COMM_H_
#define MORI_CCO_DEV_COMM_H_

/* NVRTC has no host <stdint.h>: it gets the fixed-width names from here instead. */
#if defined(__CUDACC_RTC__)
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif

#define MORI_CCO_DEV_COMM_MAGIC 0x0CC0AAAAu
#define MORI_CCO_DEV_COMM_VERSION 2u

/* GDA connection types, numbered as MORI's. */
#define MORI_CCO_GDA_CONNECTION_NONE 0
#define MORI_CCO_GDA_CONNECTION_FULL 1
#define MORI_CCO_GDA_CONNECTION_CROSSNODE 2
#define MORI_CCO_GDA_CONNECTION_RAIL 3

/* Codes of the error word. */
#define MORI_CCO_ERR_NONE 0u
#define MORI_CCO_ERR_BARRIER_TIMEOUT 1u
#define MORI_CCO_ERR_SIGNAL_TIMEOUT 2u
#define MORI_CCO_ERR_BAD_PEER 3u
#define MORI_CCO_ERR_GDA 4u /* a GDA request failed; the proxy's error word says how */
#define MORI_CCO_ERR_BAD_ARGUMENT 5u /* a device call got an argument outside its contract */

typedef struct {
  uint64_t offset; /* inside every rank's slot */
  uint64_t size;
} mori_cco_window_t;

typedef struct {
  uint32_t magic;
  uint32_t version;
  int32_t rank;
  int32_t world_size;
  int32_t lsa_rank;
  int32_t lsa_size;
  int32_t node;
  int32_t num_nodes;
  int32_t node_start; /* world rank of LSA rank 0 of this node: ranks of a node are contiguous */
  int32_t gda_connection_type;
  uint64_t flat_base;     /* this process's address of LSA rank 0's slot */
  uint64_t per_rank_size; /* slot stride in bytes */
  mori_cco_window_t resource;
  uint32_t lsa_barrier_count;
  uint32_t signal_count;
  uint32_t counter_count;
  uint32_t ce_queue_count;
  uint64_t barrier_epoch_offset;
  uint64_t barrier_inbox_offset;
  uint64_t signal_offset;
  uint64_t counter_offset;
  uint64_t ce_signal_offset;
  uint64_t error_offset;
  uint64_t spin_timeout_ns; /* bound of every wait; 0 waits forever */
  /* GDA (ranks on other nodes; see mori_cco/device/gda.cuh). gda_ring: device address of the
   * device proxy's ring (mori_shmem/proxy_ring.h), 0 when the communicator spans one node or runs
   * on the cpu backend. gda_words_offset: slot offset of the proxy's words, laid out as mori-shmem's
   * heap sync words (its error word, then its ticket word; mori_shmem.h, remote regions). */
  uint64_t gda_ring;
  uint64_t gda_words_offset;
} mori_cco_dev_comm_t;

/* A team: a subset of the world with an arithmetic rank map,
 * world_rank = base + team_rank * stride (MORI's ccoTeam, with the base made explicit). */
typedef struct {
  int32_t nranks;
  int32_t rank; /* this rank's index in the team, -1 when not a member */
  int32_t stride;
  int32_t base;
} mori_cco_team_t;

#endif /* MORI_CCO_DEV_COMM_H_ */
