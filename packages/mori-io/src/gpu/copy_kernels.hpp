// SPDX-License-Identifier: MIT
// The P2P backend's copy kernels (kernels/copy_batch.cu): a transfer of many descriptors in one
// launch (the descriptors go into pinned host memory the GPU reads directly, so thousands of small
// blocks cost one launch instead of one driver call per block), or one contiguous run; either
// reports its completion through a DoneSignal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/completion.hpp"
#include "gpu/cuda_driver.hpp"

namespace mori::io::gpu {

// Threads per block of every copy kernel (their __launch_bounds__).
constexpr unsigned kCopyThreads = 512;

// Mirrors CopyDesc of kernels/copy_batch.cu.
struct CopyDesc {
  uint64_t dst;
  uint64_t src;
  uint64_t size;
};

// Host-pinned, device-mapped descriptor storage; grows, never shrinks.
class DescriptorTable {
 public:
  DescriptorTable() = default;
  ~DescriptorTable();
  DescriptorTable(const DescriptorTable&) = delete;
  DescriptorTable& operator=(const DescriptorTable&) = delete;

  // Cuts each (dst, src, size) copy into pieces of at most kMaxPieceBytes so every thread block
  // gets a bounded share, storing them in the table; returns the piece count. Throws Error on a
  // CUDA failure (allocating or mapping the table).
  uint32_t fill(const std::vector<CopyDesc>& copies);
  cuda::CUdeviceptr device_address() const { return device_; }

  static constexpr uint64_t kMaxPieceBytes = 256 * 1024;

 private:
  void reserve(size_t count);
  CopyDesc* host_ = nullptr;
  cuda::CUdeviceptr device_ = 0;
  size_t capacity_ = 0;
};

class CopyKernels {
 public:
  // Loads the PTX into device's primary context (bound by the caller); throws Error(System) when
  // the driver cannot JIT it (a driver older than the PTX ISA the toolkit emitted).
  explicit CopyKernels(int device);
  // Enqueues one launch copying the table's `count` pieces on stream; returns the driver's result.
  cuda::CUresult launch_batch(cuda::CUstream stream, const DescriptorTable& table, uint32_t count,
                              const DoneSignal& done) const;
  // Enqueues one launch copying `size` bytes from src to dst on stream.
  cuda::CUresult launch_run(cuda::CUstream stream, uint64_t dst, uint64_t src, uint64_t size,
                            const DoneSignal& done) const;
  cuda::CUmodule module() const { return module_; }

 private:
  cuda::CUmodule module_ = nullptr;  // lives as long as the process, like mori-io's streams
  cuda::CUfunction batch_ = nullptr;
  cuda::CUfunction run_ = nullptr;
  uint32_t max_run_blocks_ = 0;
};

}  // namespace mori::io::gpu
