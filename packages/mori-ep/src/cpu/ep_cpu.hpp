// SPDX-License-Identifier: MIT
// The cpu backend of dispatch and combine: the same protocol as the CUDA kernels
// (src/device/ep_dispatch.cu, ep_combine.cu, ep_net.cu), run by the calling process's thread on
// host memory.
#pragma once

#include <cstddef>
#include <functional>

#include "../device/ep_args.h"

namespace mori::ep::cpu {

// All throw WaitTimeout when a peer does not answer in time (PeerFailure when mori-shmem reports
// one lost), and record receive overflows and bad expert ids in the region's error word like the
// kernels do.
void Dispatch(const mori_ep_args_t& a);
void Combine(const mori_ep_args_t& a, int dtype, int quant);

// The pieces of combine that the inter-node types (net.cpp) reuse.
// Stage the external input into the registered buffer, then the barrier among the local PEs.
void CombineStageAndBarrier(const mori_ep_args_t& a, int dtype, int quant);
// Where a pull writes: row t sums the local PEs' registered rows dest_map[t * topk + k] names.
struct PullTarget {
  const int* dest_map = nullptr;
  int rows = 0;
  std::function<bool(int)> valid;  // rows to skip (empty: none)
  char* out = nullptr;
  size_t out_stride = 0;
  char* weights = nullptr;
  size_t weights_stride = 0;
};
void Pull(const mori_ep_args_t& a, int dtype, int quant, const PullTarget& target);
float LoadElement(const char* row, int i, int dtype);
void StoreElement(char* row, int i, int dtype, float v);

// Inter-node kernel types (net.cpp). Dispatch = NetDispatchSend + NetDispatchRecv, combine =
// NetCombineSend + NetCombineRecv; AsyncLL exposes the halves.
void NetDispatchSend(const mori_ep_args_t& a);
void NetDispatchRecv(const mori_ep_args_t& a);
void NetCombineSend(const mori_ep_args_t& a, int dtype, int quant);
void NetCombineRecv(const mori_ep_args_t& a, int dtype);

}  // namespace mori::ep::cpu
