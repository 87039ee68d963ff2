// SPDX-License-Identifier: MIT
#include "gpu/batch_copy.hpp"

#include <algorithm>

#include "engine/error.hpp"

namespace mori::io::gpu {

namespace {

const char kCopyBatchPtx[] =
#include "gpu/kernels/copy_batch_ptx.inc"
    ;

constexpr unsigned kThreads = 512;  // the kernel's __launch_bounds__
// Enough blocks to fill an H200 several times over; the kernel strides over further pieces.
constexpr uint32_t kMaxBlocks = 4096;

}  // namespace

DescriptorTable::~DescriptorTable() {
  if (host_ != nullptr) cuda::driver().cuMemFreeHost(host_);
}

void DescriptorTable::reserve(size_t count) {
  if (count <= capacity_) return;
  size_t capacity = std::max<size_t>(1024, capacity_);
  while (capacity < count) capacity *= 2;
  const cuda::Driver& d = cuda::driver();
  void* host = nullptr;
  cuda::check(d.cuMemHostAlloc(&host, capacity * sizeof(CopyDesc), cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
              "cuMemHostAlloc", "allocating a P2P descriptor table");
  cuda::CUdeviceptr device = 0;
  const cuda::CUresult r = d.cuMemHostGetDevicePointer(&device, host, 0);
  if (r != cuda::kSuccess) {
    d.cuMemFreeHost(host);
    cuda::check(r, "cuMemHostGetDevicePointer", "mapping a P2P descriptor table");
  }
  if (host_ != nullptr) d.cuMemFreeHost(host_);
  host_ = static_cast<CopyDesc*>(host);
  device_ = device;
  capacity_ = capacity;
}

uint32_t DescriptorTable::fill(const std::vector<CopyDesc>& copies) {
  size_t pieces = 0;
  for (const CopyDesc& c : copies) pieces += (c.size + kMaxPieceBytes - 1) / kMaxPieceBytes;
  if (pieces > UINT32_MAX) throw Error(Code::InvalidArgument, "a P2P batch of " + std::to_string(pieces) + " pieces");
  reserve(pieces);
  size_t n = 0;
  for (const CopyDesc& c : copies) {
    for (uint64_t at = 0; at < c.size; at += kMaxPieceBytes) {
      host_[n++] = CopyDesc{c.dst + at, c.src + at, std::min(kMaxPieceBytes, c.size - at)};
    }
  }
  return static_cast<uint32_t>(n);
}

BatchCopyKernel::BatchCopyKernel(int device) {
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.cuModuleLoadData(&module_, kCopyBatchPtx), "cuModuleLoadData",
              "loading the P2P batch-copy kernel on GPU " + std::to_string(device));
  cuda::check(d.cuModuleGetFunction(&function_, module_, "mori_io_copy_batch"), "cuModuleGetFunction",
              "finding the P2P batch-copy kernel on GPU " + std::to_string(device));
}

cuda::CUresult BatchCopyKernel::launch(cuda::CUstream stream, const DescriptorTable& table, uint32_t count) const {
  cuda::CUdeviceptr descs = table.device_address();
  uint32_t n = count;
  void* params[] = {&descs, &n};
  return cuda::driver().cuLaunchKernel(function_, std::min(count, kMaxBlocks), 1, 1, kThreads, 1, 1, 0, stream, params,
                                       nullptr);
}

}  // namespace mori::io::gpu
