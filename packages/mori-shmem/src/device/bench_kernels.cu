// SPDX-License-Identifier: MIT
// Kernels of mori-shmem-bench (cuda backend). The put kernel splits one message over `workers`
// callers of the chosen scope (MORI_BENCH_SCOPE: 0 thread, 1 warp, 2 block), the way a real
// kernel spreads a transfer over the grid, so each scope is measured at the parallelism it is
// meant for. The state comes by value as a __grid_constant__ parameter, read in place from the
// constant bank (a plain by-value struct would be copied to local memory, i.e. into the L1 that
// every acquire load invalidates).
#include "mori_shmem/mori_shmem_device.cuh"

#ifndef MORI_BENCH_SCOPE
#define MORI_BENCH_SCOPE 2
#endif

using namespace mori::shmem;

// Block scope: two 512-thread blocks per SM, so one block copies while its neighbour starts or
// fences; the block copy (4 vectors in flight a thread) fits in 64 registers. The warp and thread
// copies keep 8 in flight and take up to 128.
#if MORI_BENCH_SCOPE == 2
#define MORI_BENCH_BOUNDS __launch_bounds__(512, 2)
#else
#define MORI_BENCH_BOUNDS __launch_bounds__(512)
#endif

// Puts bytes [w*slice, +slice) of src into PE pe's copy of dest for every slice w < workers,
// `reps` times (each completed before the next), so small messages measure the put rather than the
// launch. A worker is a block, a warp or a thread; it takes slices worker, worker + the grid's
// workers, ... (the benchmark gives block scope a block per slice, and walks larger messages with
// the smaller scopes in windows of the grid, as a copy kernel walks memory). The conditions below
// are uniform over a worker, as the warp and block calls require. One thread of a worker quiets
// for it after its slices, as a kernel would (the group barrier puts the other threads' stores
// before its fence); through the device proxy every quiet is a ring request, and one per thread
// of a large block swamps the proxy.
extern "C" __global__ void MORI_BENCH_BOUNDS mori_bench_put(const __grid_constant__ mori_shmem_device_state_t st, char* dest,
                                          const char* src, unsigned long long bytes, unsigned long long slice, int workers, int pe,
                                          int reps) {
#if MORI_BENCH_SCOPE == 2
  const int worker = blockIdx.x;
  const int grid_workers = gridDim.x;
#elif MORI_BENCH_SCOPE == 1
  const int worker = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int grid_workers = gridDim.x * (blockDim.x / 32);
#else
  const int worker = blockIdx.x * blockDim.x + threadIdx.x;
  const int grid_workers = gridDim.x * blockDim.x;
#endif
  if (worker >= workers) return;
  for (int rep = 0; rep < reps; ++rep) {
    for (int w = worker; w < workers; w += grid_workers) {
      const unsigned long long begin = static_cast<unsigned long long>(w) * slice;
      const unsigned long long length = slice < bytes - begin ? slice : bytes - begin;
#if MORI_BENCH_SCOPE == 2
      ShmemPutMemNbiBlock(st, dest + begin, src + begin, length, pe);  // ends with __syncthreads
#elif MORI_BENCH_SCOPE == 1
      ShmemPutMemNbiWarp(st, dest + begin, src + begin, length, pe);  // ends with __syncwarp
#else
      ShmemPutMemNbiThread(st, dest + begin, src + begin, length, pe);
#endif
    }
#if MORI_BENCH_SCOPE == 2
    if (threadIdx.x == 0) ShmemQuietThread(st);
    __syncthreads();
#elif MORI_BENCH_SCOPE == 1
    if (threadIdx.x % 32 == 0) ShmemQuietThread(st);
    __syncwarp();
#else
    ShmemQuietThread(st);
#endif
  }
}

// One thread on each of two PEs: `iters` round trips of a `bytes`-byte put-with-signal. The
// initiator puts, then waits for the reply; the responder waits, then replies. Writes the
// initiator's elapsed nanoseconds (%globaltimer) to *elapsed_ns.
extern "C" __global__ void mori_bench_pingpong(const __grid_constant__ mori_shmem_device_state_t st, char* buf,
                                               unsigned long long* signal,
                                               unsigned long long bytes, int peer, int iters, int initiator,
                                               unsigned long long* elapsed_ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  unsigned long long start, end;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (unsigned long long round = 1; round <= static_cast<unsigned long long>(iters); ++round) {
    if (!initiator) ShmemWaitUntil(st, signal, SHMEM_CMP_GE, round);
    ShmemPutMemNbiSignalThread(st, buf, buf, bytes, signal, round, mori::core::SIGNAL_SET, peer);
    if (initiator) ShmemWaitUntil(st, signal, SHMEM_CMP_GE, round);
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(end));
  if (initiator) *elapsed_ns = end - start;
}
