// SPDX-License-Identifier: MIT
// A small block of GPU memory from cuMemCreate, mapped read-write for one device. Unlike
// cuMemAlloc'd memory it belongs to no CUDA context, so DeviceContext's work context writes it
// without taking the primary context's lock (DeviceContext::WorkScope).
#pragma once

#include <cstddef>

#include "cuda/cuda_driver.hpp"

namespace mori::shmem::cuda {

class VmmBlock {
 public:
  // At least `bytes` (rounded up to the device's granularity), zeroed. The primary context must be
  // current (DeviceContext::bind) for the zeroing. `what` names the memory in errors.
  VmmBlock(int ordinal, size_t bytes, const char* what);
  ~VmmBlock();
  VmmBlock(const VmmBlock&) = delete;
  VmmBlock& operator=(const VmmBlock&) = delete;

  CUdeviceptr address() const { return address_; }

 private:
  void release() noexcept;

  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace mori::shmem::cuda
