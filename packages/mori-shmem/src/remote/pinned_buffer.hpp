// SPDX-License-Identifier: MIT
// Pinned, device-mapped host memory (cuMemHostAlloc PORTABLE | DEVICEMAP): what the remote
// transport stages GPU bytes through, and where the device proxy's ring lives.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/context.hpp"

namespace mori::shmem::remote {

class PinnedBuffer {
 public:
  PinnedBuffer(const cuda::DeviceContext& context, size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* host() const { return host_; }
  uint64_t device() const { return device_; }  // the same memory as the GPU addresses it
  size_t size() const { return size_; }

 private:
  uint8_t* host_ = nullptr;
  uint64_t device_ = 0;
  size_t size_;
};

}  // namespace mori::shmem::remote
