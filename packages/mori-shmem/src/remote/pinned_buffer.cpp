// SPDX-License-Identifier: MIT
#include "remote/pinned_buffer.hpp"

namespace mori::shmem::remote {

PinnedBuffer::PinnedBuffer(const cuda::DeviceContext& context, size_t bytes) : size_(bytes) {
  const cuda::Driver& d = cuda::driver();
  context.bind();
  void* host = nullptr;
  cuda::check(d.cuMemHostAlloc(&host, bytes, cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
              "cuMemHostAlloc", "allocating pinned staging memory for the remote transport");
  host_ = static_cast<uint8_t*>(host);
  cuda::CUdeviceptr device = 0;
  const cuda::CUresult mapped = d.cuMemHostGetDevicePointer(&device, host, 0);
  if (mapped != cuda::kSuccess) {
    d.cuMemFreeHost(host);
    cuda::check(mapped, "cuMemHostGetDevicePointer", "mapping pinned memory into the GPU");
  }
  device_ = device;
}

PinnedBuffer::~PinnedBuffer() {
  if (host_ != nullptr) cuda::driver().cuMemFreeHost(host_);
}

}  // namespace mori::shmem::remote
