// SPDX-License-Identifier: MIT
// GDA in one kernel: every block sends its share of this rank's bytes to its rail peer on the next
// node (gda_put_signal, at the chosen cooperative scope), reads the next node's copy back with
// gda_get, stores a word there with gda_put_value, flushes with gda_counter, and waits for the
// share its rail peer on the previous node sent.
#include <mori_cco/cco_device.cuh>

namespace dev = mori::cco::device;

template <typename Coop>
__device__ void exchange(Coop coop, const mori_cco_dev_comm_t& comm, mori_cco_window_t window, int next,
                         unsigned long long bytes, unsigned long long offset, unsigned long long share,
                         unsigned round) {
  dev::gda_put_signal(coop, comm, next, window, bytes + offset, window, offset, share, /*id=*/0, /*value=*/1);
  dev::gda_get(coop, comm, next, window, offset, dev::local_ptr(comm, window, 2 * bytes + offset), share);
  if (coop.thread_rank() == 0) dev::gda_put_value(comm, next, window, 3 * bytes + 8 * blockIdx.x, round + 1, 8);
  dev::gda_counter(coop, comm, /*id=*/0);  // flushes: the value is at the peer
}

// window: [0, bytes) this rank's data, [bytes, 2 bytes) what the previous node's rail peer sends,
// [2 bytes, 3 bytes) what gda_get reads from the next node's rail peer, then one 8-byte word per
// block that the previous node's rail peer stores with gda_put_value.
// round: how many times this kernel ran before on this dev comm (signals are never reset).
// scope: 0 thread, 1 warp, 2 block.
extern "C" __global__ void gda_put(mori_cco_dev_comm_t comm, mori_cco_window_t window, unsigned long long bytes,
                                   unsigned round, int scope) {
  const mori_cco_team_t rail = dev::team_rail(comm);
  const int next = dev::team_rank_to_world(rail, (rail.rank + 1) % rail.nranks);
  const unsigned long long share = bytes / gridDim.x;
  const unsigned long long offset = share * blockIdx.x;
  if (scope == 2) {
    exchange(dev::CoopBlock{}, comm, window, next, bytes, offset, share, round);
  } else if (scope == 1 && threadIdx.x < 32) {
    exchange(dev::CoopWarp{}, comm, window, next, bytes, offset, share, round);
  } else if (scope == 0 && threadIdx.x == 0) {
    exchange(dev::CoopThread{}, comm, window, next, bytes, offset, share, round);
  }
  if (threadIdx.x == 0) {
    dev::wait_signal(comm, 0, static_cast<unsigned long long>(round + 1) * gridDim.x);
    // Each block's exchange bumped counter 0 once per round, after its requests completed.
    dev::wait_counter(comm, 0, static_cast<unsigned long long>(round + 1) * gridDim.x);
  }
}
