// SPDX-License-Identifier: MIT
#include "gpu/copy_kernels.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "gpu/device.hpp"

namespace mori::io::gpu {

namespace {

const char kCopyBatchPtx[] =
#include "gpu/kernels/copy_batch_ptx.inc"
    ;

// Enough blocks to fill an H200 several times over; the kernel strides over further pieces.
constexpr uint32_t kMaxBlocks = 4096;
// The run kernel's smallest piece (MORI_IO_RUN_MIN_PIECE): no more blocks than pieces.
constexpr uint64_t kRunMinPieceBytes = 512 * 16;
// One block of 512 threads per SM, each with up to 64 bytes in flight, measured faster on an
// H200 than four (1.80 vs 1.55 TB/s at 256 MiB, bytes counted once).
constexpr uint32_t kRunBlocksPerSm = 1;

}  // namespace

DescriptorTable::~DescriptorTable() {
  if (host_ != nullptr) cuda::driver().cuMemFreeHost(host_);
}

void DescriptorTable::reserve(size_t count) {
  if (count <= capacity_) return;
  size_t capacity = std::max<size_t>(1024, capacity_);
  while (capacity < count) capacity *= 2;
  cuda::CUdeviceptr device = 0;
  void* host = alloc_mapped_host(capacity * sizeof(CopyDesc), &device, "a P2P descriptor table");
  if (host_ != nullptr) cuda::driver().cuMemFreeHost(host_);
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

CopyKernels::CopyKernels(int device) {
  const cuda::Driver& d = cuda::driver();
  const std::string where = " on GPU " + std::to_string(device);
  cuda::check(d.cuModuleLoadData(&module_, kCopyBatchPtx), "cuModuleLoadData", "loading the P2P copy kernels" + where);
  cuda::check(d.cuModuleGetFunction(&batch_, module_, "mori_io_copy_batch"), "cuModuleGetFunction",
              "finding the P2P batch-copy kernel" + where);
  cuda::check(d.cuModuleGetFunction(&run_, module_, "mori_io_copy_run"), "cuModuleGetFunction",
              "finding the P2P run-copy kernel" + where);
  max_run_blocks_ = std::max(1u, static_cast<uint32_t>(multiprocessor_count(device)) * kRunBlocksPerSm);
}

cuda::CUresult CopyKernels::launch_batch(cuda::CUstream stream, const DescriptorTable& table, uint32_t count,
                                         const DoneSignal& done) const {
  cuda::CUdeviceptr descs = table.device_address();
  uint32_t n = count;
  cuda::CUdeviceptr arrivals = done.arrivals;
  cuda::CUdeviceptr flag = done.flag;
  uint64_t seq = done.seq;
  void* params[] = {&descs, &n, &arrivals, &flag, &seq};
  return cuda::driver().cuLaunchKernel(batch_, std::min(count, kMaxBlocks), 1, 1, kCopyThreads, 1, 1, 0, stream, params,
                                       nullptr);
}

cuda::CUresult CopyKernels::launch_run(cuda::CUstream stream, uint64_t dst, uint64_t src, uint64_t size,
                                       const DoneSignal& done) const {
  // The kernel sizes its pieces to the grid (run_piece in copy_batch.cu), at least kRunMinPieceBytes.
  const uint64_t pieces = std::max<uint64_t>(1, (size + kRunMinPieceBytes - 1) / kRunMinPieceBytes);
  const auto blocks = static_cast<unsigned>(std::min<uint64_t>(pieces, max_run_blocks_));
  cuda::CUdeviceptr arrivals = done.arrivals;
  cuda::CUdeviceptr flag = done.flag;
  uint64_t seq = done.seq;
  void* params[] = {&dst, &src, &size, &arrivals, &flag, &seq};
  return cuda::driver().cuLaunchKernel(run_, blocks, 1, 1, kCopyThreads, 1, 1, 0, stream, params, nullptr);
}

}  // namespace mori::io::gpu
