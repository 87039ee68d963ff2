// SPDX-License-Identifier: MIT
// What every kernel file (ep_dispatch.cu, ep_combine.cu, ep_net.cu) is compiled with: the
// compile-time world size and top-k as constants, and each warp's place in the grid.
#pragma once

#include "ep_common.cuh"

#ifndef MORI_EP_WORLD
#error "MORI_EP_WORLD must be defined"
#endif
#ifndef MORI_EP_TOPK
#error "MORI_EP_TOPK must be defined"
#endif

namespace mori::ep {

constexpr int kWorld = MORI_EP_WORLD;
constexpr int kTopk = MORI_EP_TOPK;

// A warp-per-item kernel's view of the grid: this thread's lane, this warp's index, warps in all.
struct GridWarp {
  int lane;
  int warp;
  int warps;
};
__device__ __forceinline__ GridWarp ThisWarp() {
  return {static_cast<int>(threadIdx.x & 31), static_cast<int>(blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)),
          static_cast<int>(gridDim.x * (blockDim.x >> 5))};
}

// The lowest lane still in `rest` (a ballot of the lanes holding a pick), taken out of it; lane 0
// once none is left, so a loop over kTopk picks may run past the count with harmless shuffles.
__device__ __forceinline__ int PopLowestLane(unsigned& rest) {
  const int lane = rest ? __ffs(rest) - 1 : 0;
  rest &= rest - 1;
  return lane;
}

}  // namespace mori::ep
