// SPDX-License-Identifier: MIT
// The device API in one kernel: every block puts its share of this rank's bytes into the next LSA
// rank's window (at the chosen cooperative scope) with a signal, waits for the previous rank's
// signals, then meets the same block of every peer at an LSA barrier.
#include <mori_cco/cco_device.cuh>

namespace dev = mori::cco::device;

template <typename Coop>
__device__ void put_share(Coop coop, const mori_cco_dev_comm_t& comm, mori_cco_window_t window, int next,
                          unsigned long long offset, unsigned long long bytes, unsigned long long share) {
  const void* src = dev::local_ptr(comm, window, offset);
  dev::put_signal(coop, comm, next, window, bytes + offset, src, share, /*id=*/0, /*value=*/1);
}

// window: [0, bytes) this rank's data, [bytes, 2 * bytes) what the previous rank sends.
// round: how many times this kernel ran before on this dev comm (signals are never reset).
// scope: 0 thread, 1 warp, 2 block.
extern "C" __global__ void ring_put(mori_cco_dev_comm_t comm, mori_cco_window_t window, unsigned long long bytes,
                                    unsigned round, int scope) {
  const int next = (comm.lsa_rank + 1) % comm.lsa_size;
  const unsigned long long share = bytes / gridDim.x;
  const unsigned long long offset = share * blockIdx.x;
  if (scope == 2) {
    put_share(dev::CoopBlock{}, comm, window, next, offset, bytes, share);
  } else if (scope == 1 && threadIdx.x < 32) {
    put_share(dev::CoopWarp{}, comm, window, next, offset, bytes, share);
  } else if (scope == 0 && threadIdx.x == 0) {
    put_share(dev::CoopThread{}, comm, window, next, offset, bytes, share);
  }
  if (threadIdx.x == 0) dev::wait_signal(comm, 0, static_cast<unsigned long long>(round + 1) * gridDim.x);
  __syncthreads();
  dev::LsaBarrierSession<dev::CoopBlock> barrier(dev::CoopBlock{}, comm, blockIdx.x);
  barrier.sync();
}
