// SPDX-License-Identifier: MIT
// Completion words of the P2P copy kernels (kernels/copy_batch.cu): a launch given a slot writes
// the slot's sequence number into host-mapped memory when its last block finishes, so finding a
// transfer done is a load from host memory, not a driver call.
#pragma once

#include <cstdint>
#include <vector>

#include "gpu/cuda_driver.hpp"

namespace mori::io::gpu {

// What a kernel launch needs to report its completion; a null flag reports nothing.
struct DoneSignal {
  cuda::CUdeviceptr arrivals = 0;  // the slot's block counter, in device memory
  cuda::CUdeviceptr flag = 0;      // the slot's completion word, as the device addresses it
  uint64_t seq = 0;
};

class CompletionSlots {
 public:
  // `count` slots on the current context's device; throws Error(System) when CUDA cannot
  // allocate or map them.
  explicit CompletionSlots(uint32_t count);
  ~CompletionSlots();
  CompletionSlots(const CompletionSlots&) = delete;
  CompletionSlots& operator=(const CompletionSlots&) = delete;

  // A free slot armed with a sequence number never used before; false when all are in use.
  bool acquire(uint32_t* index, DoneSignal* signal);
  void release(uint32_t index) { free_.push_back(index); }
  // Whether the launch armed with `seq` on slot `index` has finished. Safe from any thread.
  bool done(uint32_t index, uint64_t seq) const {
    return __atomic_load_n(&words_[index * kStride], __ATOMIC_ACQUIRE) == seq;
  }

 private:
  // One completion word per 64-byte line: the GPU's writes to one slot do not disturb the
  // cache line a host thread is polling for another.
  static constexpr uint32_t kStride = 8;
  uint64_t* words_ = nullptr;
  cuda::CUdeviceptr words_on_device_ = 0;
  cuda::CUdeviceptr arrivals_ = 0;
  std::vector<uint32_t> free_;
  uint64_t next_seq_ = 1;
};

}  // namespace mori::io::gpu
