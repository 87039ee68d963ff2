// SPDX-License-Identifier: MIT
// The GPU a PE runs on and the CUDA context its memory belongs to. mori uses the device's primary
// context, the one the CUDA runtime (and so PyTorch) uses, so that heap pointers are valid in
// torch tensors and in kernels launched by any of them.
#pragma once

#include "cuda/cuda_driver.hpp"

namespace mori::shmem::cuda {

class DeviceContext {
 public:
  // Picks the device: `requested` >= 0 (MORI_SHMEM_DEVICE), else the device of the context
  // current on this thread, else rank % device count; retains its primary context.
  DeviceContext(int requested, int rank);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int ordinal() const { return ordinal_; }
  // Makes the context current on the calling thread (host calls may come from any thread).
  void bind() const;
  // Copies between any two addresses (host or device, UVA) and returns once the bytes are in place.
  // Uses the PE's own non-blocking stream: the legacy default stream would wait for every kernel
  // of the context, and a kernel spinning on a flag that this very copy sets would deadlock.
  void copy(void* dst, const void* src, size_t bytes) const;
  // Stores the 8-byte-aligned word at dst (device memory) from the GPU's front end, after a fence
  // that orders every copy before it on the same stream, and returns once it is done. Unlike a
  // kernel it needs no free SM, so it lands even while spinning grids occupy all of them.
  void write_word(void* dst, uint64_t value) const;
  // Queues the same store on a stream of its own and returns at once: for words kernels poll,
  // which no copy or launch queued on the PE's stream may hold back (a one-thread launch waits
  // for a free SM, and the SMs may be held by kernels waiting for the word). Stores land in order.
  void post_word(void* dst, uint64_t value) const;
  // Returns once every posted word has landed.
  void wait_posted_words() const;
  // Runs a one-thread launch of f on the same stream and returns when it has finished.
  void launch_single(CUfunction f, void** params) const;

 private:
  CUdevice device_ = 0;
  int ordinal_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream word_stream_ = nullptr;
};

}  // namespace mori::shmem::cuda
