/* SPDX-License-Identifier: MIT */
/*
 * The C ABI of libmori_shmem.
 *
 * This is the only contract between mori-shmem and the packages built on it (mori-ep, mori-cco,
 * mori-ir): they compile against this header and link the one libmori_shmem.so that the
 * mori-shmem wheel ships. Keep it small. Any change to a signature, a struct layout or an enum
 * value bumps MORI_SHMEM_ABI_VERSION in version.h.
 *
 * Conventions:
 *   - Every function that can fail returns a mori_shmem_status_t; 0 is success. The message of
 *     the last failure on the calling thread is available from mori_shmem_last_error().
 *   - "Symmetric address" means an address inside the calling PE's own mapping of the symmetric
 *     heap (what mori_shmem_malloc returned). Remote operations take the symmetric address and a
 *     PE number; the library translates it to that PE's copy.
 *   - Calls marked COLLECTIVE must be made by every PE, in the same order.
 */
#ifndef MORI_SHMEM_H_
#define MORI_SHMEM_H_

#include <stddef.h>
#include <stdint.h>

#include "mori_shmem/device_state.h"
#include "mori_shmem/version.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MORI_SHMEM_API __attribute__((visibility("default")))

#define MORI_SHMEM_UNIQUE_ID_BYTES 128

typedef enum {
  MORI_SHMEM_SUCCESS = 0,
  MORI_SHMEM_ERR_INVALID_ARGUMENT = 1,
  MORI_SHMEM_ERR_NOT_INITIALIZED = 2,
  MORI_SHMEM_ERR_ALREADY_INITIALIZED = 3,
  MORI_SHMEM_ERR_HEAP_EXHAUSTED = 4,
  MORI_SHMEM_ERR_TIMEOUT = 5,
  MORI_SHMEM_ERR_PEER_LOST = 6,
  MORI_SHMEM_ERR_AUTH = 7,
  MORI_SHMEM_ERR_SYSTEM = 8,
  MORI_SHMEM_ERR_SYMMETRY = 9,
  MORI_SHMEM_ERR_INVALID_POINTER = 10,
  MORI_SHMEM_ERR_PE_OUT_OF_RANGE = 11,
  MORI_SHMEM_ERR_UNSUPPORTED = 12,
  MORI_SHMEM_ERR_INTERNAL = 13,
  MORI_SHMEM_ERR_CONFIG = 14,
  MORI_SHMEM_ERR_WAIT_TIMEOUT = 15, /* shmem_wait_until expired (TIMEOUT is for the bootstrap) */
} mori_shmem_status_t;

/* Init flags, numbered as in MORI. */
enum {
  MORI_SHMEM_INIT_WITH_MPI_COMM = 0,
  MORI_SHMEM_INIT_WITH_UNIQUEID = 1,
};

typedef struct {
  char internal[MORI_SHMEM_UNIQUE_ID_BYTES];
} mori_shmem_uniqueid_t;

typedef struct {
  int32_t rank;
  int32_t nranks;
  mori_shmem_uniqueid_t uid;
  void* mpi_comm; /* reserved: MPI communicators are handled by the Python layer (mpi4py) */
} mori_shmem_init_attr_t;

/* Atomic operation codes, numbered as MORI's core::atomicType (IR passes them as raw ints). */
typedef enum {
  MORI_SHMEM_AMO_INC = 2,
  MORI_SHMEM_AMO_SET = 3,
  MORI_SHMEM_AMO_ADD = 4,
  MORI_SHMEM_AMO_AND = 5,
  MORI_SHMEM_AMO_OR = 6,
  MORI_SHMEM_AMO_XOR = 7,
  MORI_SHMEM_SIGNAL_SET = 9,
  MORI_SHMEM_SIGNAL_ADD = 10,
  MORI_SHMEM_AMO_FETCH = 12,
  MORI_SHMEM_AMO_FETCH_INC = 13,
  MORI_SHMEM_AMO_FETCH_ADD = 14,
  MORI_SHMEM_AMO_FETCH_AND = 15,
  MORI_SHMEM_AMO_FETCH_OR = 16,
  MORI_SHMEM_AMO_FETCH_XOR = 17,
  MORI_SHMEM_AMO_SWAP = 18,
  MORI_SHMEM_AMO_COMPARE_SWAP = 19,
} mori_shmem_amo_t;

/* Comparison operators for wait_until / test, numbered as NVSHMEM's. */
typedef enum {
  MORI_SHMEM_CMP_EQ = 0,
  MORI_SHMEM_CMP_NE = 1,
  MORI_SHMEM_CMP_GT = 2,
  MORI_SHMEM_CMP_LE = 3,
  MORI_SHMEM_CMP_LT = 4,
  MORI_SHMEM_CMP_GE = 5,
} mori_shmem_cmp_t;

/* Integer element types of atomics and waits. */
typedef enum {
  MORI_SHMEM_TYPE_INT32 = 0,
  MORI_SHMEM_TYPE_UINT32 = 1,
  MORI_SHMEM_TYPE_INT64 = 2,
  MORI_SHMEM_TYPE_UINT64 = 3,
} mori_shmem_int_type_t;

typedef struct {
  uintptr_t base;          /* this PE's mapping of the heap */
  uint64_t size;           /* total bytes of the heap */
  uint64_t reserved;       /* bytes at the start kept for the library's own sync words */
  uint64_t used;           /* bytes handed out to callers, padding included */
  uint64_t largest_free;   /* largest contiguous free block */
  uint64_t num_allocations;
  const char* backend;     /* "cpu" or "cuda" */
} mori_shmem_heap_info_t;

/* ---- version and errors ---- */
MORI_SHMEM_API int mori_shmem_abi_version(void);
MORI_SHMEM_API const char* mori_shmem_version(void);
MORI_SHMEM_API const char* mori_shmem_last_error(void);

/* ---- bootstrap and lifetime ---- */
/* Creates the rendezvous: finds a free port on the bootstrap interface and fills uid with that
 * address, a fresh job secret and the protocol version. Rank 0 listens on the port when it joins,
 * in whatever process it runs (the one that made the id, or a PE the launcher spawned). */
MORI_SHMEM_API int mori_shmem_get_unique_id(mori_shmem_uniqueid_t* uid);
MORI_SHMEM_API int mori_shmem_set_attr_uniqueid_args(int rank, int nranks, const mori_shmem_uniqueid_t* uid,
                                                     mori_shmem_init_attr_t* attr);
/* COLLECTIVE. Rendezvous, heap creation and mapping of every peer's heap. */
MORI_SHMEM_API int mori_shmem_init_attr(unsigned int flags, mori_shmem_init_attr_t* attr);
/* COLLECTIVE. Unmaps the heap and closes the bootstrap; init may be called again afterwards. */
MORI_SHMEM_API int mori_shmem_finalize(void);
MORI_SHMEM_API int mori_shmem_is_initialized(void);
MORI_SHMEM_API int mori_shmem_my_pe(void);
MORI_SHMEM_API int mori_shmem_n_pes(void);
/* "cpu" or "cuda": the live backend, or before init the one init would pick now. */
MORI_SHMEM_API const char* mori_shmem_backend(void);
/* 1 when a CUDA driver loads and at least one GPU is visible (what MORI_SHMEM_BACKEND=auto asks). */
MORI_SHMEM_API int mori_shmem_cuda_available(void);
/* COLLECTIVE. Host barrier over the bootstrap network; completes outstanding host RMA first. */
MORI_SHMEM_API int mori_shmem_barrier_all(void);

/* Bootstrap collectives for packages built on mori-shmem. COLLECTIVE. */
MORI_SHMEM_API int mori_shmem_bootstrap_allgather(const void* send, void* recv, size_t bytes_per_pe);
MORI_SHMEM_API int mori_shmem_bootstrap_broadcast(void* buf, size_t bytes, int root);

/* ---- bootstrap groups ----
 * A group is a bootstrap network of its own, independent of mori_shmem_init: packages that run
 * their own communicators (mori-cco) join one per communicator, so a process may hold several,
 * each used by one thread at a time. uid comes from mori_shmem_get_unique_id; the rendezvous,
 * the secret check and the timeouts are those of the shmem job's bootstrap. */
typedef struct mori_shmem_bootstrap_group* mori_shmem_bootstrap_group_t;
/* COLLECTIVE over the nranks processes joining uid. timeout_s <= 0 uses MORI_BOOTSTRAP_TIMEOUT. */
MORI_SHMEM_API int mori_shmem_bootstrap_group_create(const mori_shmem_uniqueid_t* uid, int rank, int nranks,
                                                     double timeout_s, mori_shmem_bootstrap_group_t* out);
/* Not collective: closes this rank's connections (peers see it as a lost peer). NULL is a no-op. */
MORI_SHMEM_API int mori_shmem_bootstrap_group_destroy(mori_shmem_bootstrap_group_t group);
/* COLLECTIVE. recv receives nranks * bytes_per_rank bytes, rank r's block at r * bytes_per_rank. */
MORI_SHMEM_API int mori_shmem_bootstrap_group_allgather(mori_shmem_bootstrap_group_t group, const void* send,
                                                        void* recv, size_t bytes_per_rank);
MORI_SHMEM_API int mori_shmem_bootstrap_group_barrier(mori_shmem_bootstrap_group_t group);
/* COLLECTIVE, one host only. Sends `count` of this process's file descriptors to every other rank;
 * received[r * count + i] is rank r's i-th descriptor, new in this process and owned by the
 * caller (-1 for the caller's own rank). */
MORI_SHMEM_API int mori_shmem_bootstrap_group_exchange_fds(mori_shmem_bootstrap_group_t group, const int* fds,
                                                           int count, int* received);
/* 16 hex digits (+ NUL) unique to the group's uid, for naming per-group resources such as
 * shared-memory segments; len must be at least 17. */
MORI_SHMEM_API int mori_shmem_bootstrap_group_tag(mori_shmem_bootstrap_group_t group, char* buf, size_t len);

/* ---- remote regions ----
 * The remote transport (conduits, and on GPU memory the staging and the device proxy) serving one
 * range of memory per rank of a bootstrap group, for libraries that manage memory of their own
 * (mori-cco reaches other hosts' slots with it). Offsets are offsets in the target rank's range,
 * whose size is the same on every rank. The guarantees are those of the symmetric heap's remote
 * transport: a put returns once src may be reused; everything is applied at its target after quiet;
 * a rank that observes a put-with-signal's signal observes its data; a dead peer gives an error. */
typedef struct mori_shmem_remote_region* mori_shmem_remote_region_t;
typedef struct mori_shmem_remote_region_attr {
  void* base;                /* this rank's range */
  uint64_t size;             /* the same on every rank */
  int cuda_device;           /* -1: host memory; else the ordinal of the GPU that holds the range */
  const uint8_t* reach;      /* nranks bytes: reach[r] != 0 serves rank r through the region; must be
                                transpose-consistent (r reaches q iff q reaches r) */
  uint64_t proxy_words;      /* GPU memory: offset in the range of 32 zeroed bytes laid out as the heap's
                                sync words (device_state.h): the device proxy's error word (uint32,
                                MORI_SHMEM_DEVICE_ERR_*) at MORI_SHMEM_SYNC_ERROR_OFFSET, its ticket
                                word (uint64) at MORI_SHMEM_SYNC_PROXY_TAIL_OFFSET */
} mori_shmem_remote_region_attr_t;
/* COLLECTIVE over group, which must outlive the region. timeout_s <= 0: MORI_SHMEM_WAIT_TIMEOUT. */
MORI_SHMEM_API int mori_shmem_remote_region_create(mori_shmem_bootstrap_group_t group,
                                                   const mori_shmem_remote_region_attr_t* attr, double timeout_s,
                                                   mori_shmem_remote_region_t* out);
/* Not collective: quiets, then closes this rank's side. NULL is a no-op. */
MORI_SHMEM_API int mori_shmem_remote_region_destroy(mori_shmem_remote_region_t region);
/* signal_offset == UINT64_MAX: a plain put; else the 64-bit word there then gets signal by sig_op
 * (MORI_SHMEM_SIGNAL_SET / _ADD), after the data. */
MORI_SHMEM_API int mori_shmem_remote_region_put(mori_shmem_remote_region_t region, int rank, uint64_t offset,
                                                const void* src, uint64_t nbytes, uint64_t signal_offset,
                                                uint64_t signal, int sig_op);
MORI_SHMEM_API int mori_shmem_remote_region_get(mori_shmem_remote_region_t region, int rank, uint64_t offset,
                                                void* dest, uint64_t nbytes);
MORI_SHMEM_API int mori_shmem_remote_region_signal(mori_shmem_remote_region_t region, int rank,
                                                   uint64_t signal_offset, uint64_t signal, int sig_op);
/* Every request issued before it, by host threads or by kernels through the proxy, is applied. */
MORI_SHMEM_API int mori_shmem_remote_region_quiet(mori_shmem_remote_region_t region);
/* GPU memory: the device address of the proxy ring (mori_shmem/proxy_ring.h) kernels post to
 * (device/proxy.cuh's ProxyPost with heapBase = the proxy words); 0 for host memory. *conduit
 * gets "tcp" or "ucx". */
MORI_SHMEM_API int mori_shmem_remote_region_info(mori_shmem_remote_region_t region, uint64_t* proxy_ring,
                                                 const char** conduit);

/* ---- symmetric heap ---- */
/* COLLECTIVE. size 0 yields *out = NULL. Every allocation is at least 256-byte aligned. */
MORI_SHMEM_API int mori_shmem_malloc(size_t size, void** out);
MORI_SHMEM_API int mori_shmem_malloc_align(size_t alignment, size_t size, void** out);
MORI_SHMEM_API int mori_shmem_ext_malloc_with_flags(size_t size, unsigned int flags, void** out);
/* COLLECTIVE. NULL is a no-op. */
MORI_SHMEM_API int mori_shmem_free(void* ptr);
MORI_SHMEM_API int mori_shmem_heap_info(mori_shmem_heap_info_t* info);
/* Registers local (non-symmetric) memory for use as a source or destination of transfers. */
MORI_SHMEM_API int mori_shmem_buffer_register(void* ptr, size_t size);
MORI_SHMEM_API int mori_shmem_buffer_deregister(void* ptr, size_t size);
/* The address through which this process reaches dest_pe's copy of the symmetric address dest.
 * Writes NULL to *out when dest is not inside the heap or dest_pe is not load/store reachable. */
MORI_SHMEM_API int mori_shmem_ptr_p2p(const void* dest, int my_pe, int dest_pe, void** out);
/* How this PE reaches pe: MORI_SHMEM_TRANSPORT_SELF, _P2P (load/store) or _REMOTE (the remote
 * transport, for PEs on other hosts or with P2P disabled). */
#define MORI_SHMEM_TRANSPORT_SELF 0
#define MORI_SHMEM_TRANSPORT_P2P 1
#define MORI_SHMEM_TRANSPORT_REMOTE 2
MORI_SHMEM_API int mori_shmem_pe_transport(int pe, int* out);
/* "ip:port" of this PE's remote-transport server into buf (NUL-terminated); "" when the job has
 * no remote PEs. INVALID_ARGUMENT when len is too small. */
MORI_SHMEM_API int mori_shmem_remote_endpoint(char* buf, size_t len);

/* ---- host-initiated RMA ---- */
/* dest (put) / src (get) are symmetric addresses; the other side is any local memory. */
MORI_SHMEM_API int mori_shmem_putmem(void* dest, const void* src, size_t nbytes, int pe);
MORI_SHMEM_API int mori_shmem_getmem(void* dest, const void* src, size_t nbytes, int pe);
/* Put, then update the 64-bit signal word sig_addr on pe with sig_op (SIGNAL_SET / SIGNAL_ADD)
 * so that a PE which observes the signal also observes the data. */
MORI_SHMEM_API int mori_shmem_putmem_signal(void* dest, const void* src, size_t nbytes, uint64_t* sig_addr,
                                            uint64_t signal, int sig_op, int pe);
MORI_SHMEM_API int mori_shmem_signal_op(uint64_t* sig_addr, uint64_t signal, int sig_op, int pe);
/* Atomic on the integer of type `type` at symmetric address dest on pe. `value` and `compare` carry
 * the operand bits (sign-extended for signed types). For fetching operations *fetched receives the
 * old value; it may be NULL for non-fetching ones. */
MORI_SHMEM_API int mori_shmem_atomic(void* dest, int amo, int type, uint64_t value, uint64_t compare, int pe,
                                     uint64_t* fetched);
/* Waits until the local integer at ivar satisfies (*ivar cmp value), or timeout_ms passes
 * (timeout_ms < 0: MORI_SHMEM_WAIT_TIMEOUT). *observed receives the value that satisfied it. */
MORI_SHMEM_API int mori_shmem_wait_until(const void* ivar, int type, int cmp, uint64_t value, int64_t timeout_ms,
                                         uint64_t* observed);
/* One non-blocking check of the same condition: *satisfied is 1 or 0. */
MORI_SHMEM_API int mori_shmem_test(const void* ivar, int type, int cmp, uint64_t value, int* satisfied);
/* Orders this PE's earlier puts before its later ones to the same PE. */
MORI_SHMEM_API int mori_shmem_fence(void);
/* Completes every outstanding put/get/atomic of this PE. */
MORI_SHMEM_API int mori_shmem_quiet(void);

/* ---- device side (cuda backend; MORI_SHMEM_ERR_UNSUPPORTED on the cpu backend) ---- */
/* What kernels need: pass it by value as a kernel argument, or copy it into a loaded module's
 * global `mori_shmem_device_state` (see device_state.h). */
MORI_SHMEM_API int mori_shmem_get_device_state(mori_shmem_device_state_t* out);
/* The CUDA device ordinal this PE's heap lives on. */
MORI_SHMEM_API int mori_shmem_cuda_device(int* ordinal);
/* Reads the device error word (MORI_SHMEM_DEVICE_ERR_*) that kernels set when a bounded spin
 * expires or an RMA names an unreachable PE; clears it when clear != 0. Synchronise the kernels
 * first. */
MORI_SHMEM_API int mori_shmem_device_error(int clear, uint32_t* code);

/* ---- configuration ---- */
/* Number of registered environment variables and their fields; value is the effective one. */
MORI_SHMEM_API int mori_shmem_env_count(void);
MORI_SHMEM_API int mori_shmem_env_entry(int index, const char** name, const char** type, const char** default_value,
                                        const char** doc, const char** effective_value);
/* Parses a size string ("6G", "512M", "4096", "1.5GiB") into bytes. */
MORI_SHMEM_API int mori_shmem_parse_size(const char* text, uint64_t* bytes);

#ifdef __cplusplus
}
#endif

#endif /* MORI_SHMEM_H_ */
