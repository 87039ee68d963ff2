// SPDX-License-Identifier: MIT
// Cooperative scopes (MORI's ccoCoopThread / ccoCoopWarp / ccoCoopBlock): the set of threads that
// call a device API function together and share its work. Every member must make the call, with
// the same arguments, because the functions synchronise the scope.
//
// any(p) is sync() that also tells every member whether some member passed true: a bounded wait
// ends the same way on every thread of the scope, so none of them is left in a later sync().
#pragma once

namespace mori::cco::device {

struct CoopThread {
  __device__ __forceinline__ int thread_rank() const { return 0; }
  __device__ __forceinline__ int size() const { return 1; }
  __device__ __forceinline__ void sync() const {}
  __device__ __forceinline__ bool any(bool p) const { return p; }
};

// A whole warp of 32 lanes, all active: NVIDIA's warp size is 32 on every target.
struct CoopWarp {
  static constexpr unsigned kFullMask = 0xFFFFFFFFu;
  __device__ __forceinline__ int thread_rank() const {
    unsigned lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return static_cast<int>(lane);
  }
  __device__ __forceinline__ int size() const { return 32; }
  __device__ __forceinline__ void sync() const { __syncwarp(kFullMask); }
  __device__ __forceinline__ bool any(bool p) const { return __any_sync(kFullMask, p) != 0; }
};

// Every thread of the block (of any shape, ranked x fastest).
struct CoopBlock {
  __device__ __forceinline__ int thread_rank() const {
    return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  }
  __device__ __forceinline__ int size() const { return static_cast<int>(blockDim.x * blockDim.y * blockDim.z); }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
  __device__ __forceinline__ bool any(bool p) const { return __syncthreads_or(p) != 0; }
};

}  // namespace mori::cco::device
