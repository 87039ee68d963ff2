/* SPDX-License-Identifier: MIT */
/*
 * What device code needs to know about the symmetric heap, as one plain C struct that host C++
 * and CUDA C++ both compile. The host fills it after init (mori_shmem_get_device_state) and hands
 * it to kernels either by value as a kernel argument or by copying it into a loaded module's
 * global `mori_shmem_device_state` (mori.shmem.shmem_module_init). Any change to the layout
 * bumps MORI_SHMEM_DEVICE_STATE_VERSION and MORI_SHMEM_ABI_VERSION.
 */
#ifndef MORI_SHMEM_DEVICE_STATE_H_
#define MORI_SHMEM_DEVICE_STATE_H_

/* Plain C types only, so NVRTC (which has no <stdint.h> of the host) compiles this unchanged. */

#define MORI_SHMEM_DEVICE_STATE_VERSION 2

/* The library's own words at the start of every PE's heap (inside the reserved bytes that
 * mori_shmem_heap_info reports), as byte offsets from the heap base. */
#define MORI_SHMEM_SYNC_BARRIER_EPOCH_OFFSET 0 /* uint64: device barriers this PE has entered */
#define MORI_SHMEM_SYNC_ERROR_OFFSET 8         /* uint32: first device-side error (codes below) */
#define MORI_SHMEM_SYNC_SCRATCH_OFFSET 16      /* uint64: where host-launched atomics put old values */
#define MORI_SHMEM_SYNC_PROXY_TAIL_OFFSET 24   /* uint64: next ticket of the device proxy's ring */
#define MORI_SHMEM_SYNC_ARRIVE_OFFSET 64       /* uint64[n_pes]: peer i writes its epoch at [i] */
#define MORI_SHMEM_SYNC_BYTES 4096             /* so a device barrier spans at most 504 PEs */
#define MORI_SHMEM_DEVICE_BARRIER_MAX_PES ((MORI_SHMEM_SYNC_BYTES - MORI_SHMEM_SYNC_ARRIVE_OFFSET) / 8)

/* Peers whose heap base the state carries inline: kernels read those from the constant bank (the
 * state is a kernel parameter or a __constant__ module global), which the L1 invalidation of every
 * system-scope acquire load does not touch; a table in global memory would cost an L2 round trip
 * per put after each wait. Higher PEs are looked up in peer_bases. */
#define MORI_SHMEM_DEVICE_INLINE_PEERS 8

/* Values of the error word; the host reads it after a kernel and raises. */
#define MORI_SHMEM_DEVICE_OK 0
#define MORI_SHMEM_DEVICE_ERR_WAIT_TIMEOUT 1   /* a bounded spin (wait_until, barrier) expired */
#define MORI_SHMEM_DEVICE_ERR_UNREACHABLE_PE 2 /* an RMA named a PE this PE cannot load/store */
#define MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT 3 /* unknown amo/cmp/type code, bad immediate size */
#define MORI_SHMEM_DEVICE_ERR_BAD_ADDRESS 4 /* a symmetric address (+ length) outside the heap, misaligned word */

typedef struct mori_shmem_device_state {
  unsigned int version;         /* MORI_SHMEM_DEVICE_STATE_VERSION once filled; 0 = never filled */
  int my_pe;
  int n_pes;
  unsigned int flags;        /* reserved, 0 */
  unsigned long long heap_base;       /* this PE's heap, device address */
  unsigned long long heap_size;       /* bytes, the same on every PE */
  unsigned long long peer_bases;      /* device address of uint64_t[n_pes]: each PE's heap as mapped in this
                               process (peer_bases[my_pe] == heap_base); 0 = not P2P reachable */
  unsigned long long spin_timeout_ns; /* bound of device spins (MORI_SHMEM_DEVICE_SPIN_TIMEOUT); 0 = none */
  unsigned long long peer_base[MORI_SHMEM_DEVICE_INLINE_PEERS]; /* = peer_bases[0..8), 0 past n_pes */
  unsigned long long proxy_ring; /* device address of this PE's mori_shmem_proxy_ring_t (proxy_ring.h), through
                                    which kernels reach PEs with peer base 0; 0 = every PE is load/store reachable */
} mori_shmem_device_state_t;

#endif /* MORI_SHMEM_DEVICE_STATE_H_ */
