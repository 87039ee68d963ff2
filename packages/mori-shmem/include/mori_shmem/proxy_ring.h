/* SPDX-License-Identifier: MIT */
/*
 * NOTE [device proxy]
 * How a kernel reaches a PE it cannot load/store (another host, or P2P disabled): it writes a
 * request into this ring, which lives in pinned host memory mapped into the GPU, and the PE's
 * proxy thread (src/remote/device_proxy.cpp) carries it out over the remote transport.
 *
 *   1. A thread takes a ticket with a system-scope atomicAdd on the tail word, which lives in
 *      the PE's own GPU heap (MORI_SHMEM_SYNC_PROXY_TAIL_OFFSET): GPU atomics on host memory are
 *      not atomic over PCIe.
 *   2. It waits until the slot (ticket % capacity) is free: ticket < head + capacity.
 *   3. It writes the entry, then publishes it with a release store of state = ticket + 1.
 *   4. The proxy takes entries in ticket order (ready puts and QUIETs together as one batch, whose
 *      puts it merges: NOTE [coalesced puts] in src/remote/put_batch.hpp), carries them out, and
 *      then sets state = 0 (slot free) or, for a request with an answer (a fetching atomic),
 *      stores the answer and sets state = ANSWERED | ticket; the kernel reads the answer and
 *      frees the slot itself. `done` counts the requests carried out, in order: a kernel that
 *      waits for done > ticket knows its request (and every earlier one) is complete.
 * Kernels wait on head and done in GPU memory (device_words), which the proxy keeps equal to the
 * ring's own words with stream writes: GPU threads polling pinned host memory across PCIe slow
 * every copy between host and GPU 20 to 140 fold, the proxy's staging copies among them (issue
 * 32, ci/gpu/copy_probe.py). The ring's head and done stay current for kernels built before
 * device_words existed (it reads 0 in the rings of such libraries, and new kernels then poll
 * these).
 * QUIET asks the proxy to complete every earlier remote put at its target before done moves on.
 * Plain C types only: host C++ and device code (NVRTC, clang) compile it alike.
 */
#ifndef MORI_SHMEM_PROXY_RING_H_
#define MORI_SHMEM_PROXY_RING_H_

#define MORI_SHMEM_PROXY_RING_ENTRIES 1024
#define MORI_SHMEM_PROXY_ANSWERED (1ull << 63)

#define MORI_SHMEM_PROXY_PUT 1        /* local -> pe's heap[offset, +bytes) */
#define MORI_SHMEM_PROXY_GET 2        /* pe's heap[offset, +bytes) -> local; the kernel waits */
#define MORI_SHMEM_PROXY_PUT_SIGNAL 3 /* PUT, then the signal word at signal_offset gets value by amo */
#define MORI_SHMEM_PROXY_SIGNAL 4     /* the signal word at offset gets value by amo */
#define MORI_SHMEM_PROXY_AMO 5        /* non-fetching atomic amo of integer type at offset */
#define MORI_SHMEM_PROXY_AMO_FETCH 6  /* fetching atomic: answered with the old value */
#define MORI_SHMEM_PROXY_PUT_IMM 7    /* the low `bytes` (1, 2, 4, 8) bytes of value -> pe's heap[offset] */
#define MORI_SHMEM_PROXY_QUIET 8      /* complete every earlier put at its target */
#define MORI_SHMEM_PROXY_PUT_SIGNAL_INLINE 9 /* PUT_SIGNAL whose `bytes` travel in payload, not at local */

/* A put-with-signal of at most this many bytes carries them in its entry: the proxy sends them from
 * the ring, with no staging copy out of the GPU, and the kernel need not wait for the proxy to take
 * its source (issue 32: the copy and the wait were most of a small signal's latency). Kernels do so
 * only where the ring's features word has MORI_SHMEM_PROXY_FEATURE_INLINE: a proxy of a library
 * before mori-shmem 0.1.12 leaves it 0 and does not know the op, and prebuilt device code (mori-ir's
 * bitcode) may meet such a library. */
#define MORI_SHMEM_PROXY_INLINE_BYTES 40
#define MORI_SHMEM_PROXY_FEATURE_INLINE 1ull

typedef struct mori_shmem_proxy_entry {
  unsigned long long state; /* see above */
  unsigned int op;
  int pe;
  int amo;                  /* MORI_SHMEM_AMO_* / SIGNAL_* */
  unsigned int type;        /* integer type code of an atomic (MORI_SHMEM_TYPE_*) */
  unsigned long long local; /* device address: a put's source, a get's destination */
  unsigned long long offset;
  unsigned long long bytes;
  unsigned long long value;
  unsigned long long compare;
  unsigned long long signal_offset;
  unsigned long long answer;
  unsigned long long payload[5]; /* PUT_SIGNAL_INLINE's bytes (MORI_SHMEM_PROXY_INLINE_BYTES) */
} mori_shmem_proxy_entry_t; /* 128 bytes */

/* In GPU memory: what kernels poll. */
typedef struct mori_shmem_proxy_words {
  unsigned long long head;
  unsigned long long done;
} mori_shmem_proxy_words_t;

typedef struct mori_shmem_proxy_ring {
  unsigned long long head;         /* proxy: every slot of a ticket below head is free */
  unsigned long long done;         /* proxy: every ticket below done is carried out */
  unsigned long long device_words; /* device address of the proxy's mori_shmem_proxy_words_t, or 0 */
  unsigned long long features;     /* MORI_SHMEM_PROXY_FEATURE_* bits the proxy serves */
  unsigned long long reserved[12];
  mori_shmem_proxy_entry_t entries[MORI_SHMEM_PROXY_RING_ENTRIES];
} mori_shmem_proxy_ring_t;

#endif /* MORI_SHMEM_PROXY_RING_H_ */
