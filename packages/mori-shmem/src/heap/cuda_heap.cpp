// SPDX-License-Identifier: MIT
#include "heap/cuda_heap.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "cuda/fd_exchange.hpp"

namespace mori::shmem {

using cuda::check;
using cuda::CUdeviceptr;

namespace {

// cuMemAlloc bases are only guaranteed 256-byte aligned; the static heap over-allocates this much
// and starts at an aligned address so malloc_align up to it stays symmetric.
constexpr uint64_t kStaticBaseAlignment = uint64_t(2) << 20;
// The vmm heap reserves its range at this alignment (virtual space is cheap).
constexpr uint64_t kVmmBaseAlignment = uint64_t(1) << 30;
// MORI's smallest VMM chunk: fewer, larger chunks keep the fd exchange and the mapping count small.
constexpr uint64_t kMinVmmChunk = uint64_t(64) << 20;

uint64_t round_up(uint64_t value, uint64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

struct StaticHandle {
  cuda::CUipcMemHandle handle;
  uint64_t base_offset;  // aligned heap base minus the allocation's base
};

}  // namespace

CudaHeap::Mode parse_cuda_heap_mode(const std::string& setting) {
  return (setting == "vmm_heap" || setting == "vmm") ? CudaHeap::Mode::Vmm : CudaHeap::Mode::Static;
}

CudaHeap::CudaHeap(Bootstrap& bootstrap, uint64_t size, Mode mode, int device, double timeout_s,
                   double wait_timeout_s, const Topology& topology)
    : mode_(mode), rank_(bootstrap.rank()), size_(size), peer_bases_(bootstrap.nranks(), nullptr),
      remote_(topology.remote) {
  // A PE with remote peers serves a device proxy: with a vmm heap its copies, stream writes and
  // atomic kernel get a CUDA context of their own. Not with a static heap: a kernel of another
  // context cannot address cuMemAlloc'd memory, so the remote atomics would fault there.
  const bool proxied = std::any_of(topology.remote.begin(), topology.remote.end(), [](uint8_t r) { return r != 0; });
  context_ = std::make_unique<cuda::DeviceContext>(device, rank_, wait_timeout_s, proxied && mode == Mode::Vmm);
  const cuda::Driver& d = cuda::driver();
  try {
    if (mode == Mode::Vmm) {
      create_vmm(bootstrap, timeout_s);
    } else {
      create_static(bootstrap);
    }
    const CUdeviceptr local = reinterpret_cast<CUdeviceptr>(local_base());
    check(d.cuMemsetD8(local, 0, size_), "cuMemsetD8", "zeroing the heap");
    check(d.cuMemAlloc(&peer_table_, sizeof(uint64_t) * peer_bases_.size()), "cuMemAlloc", "allocating the peer table");
    check(d.cuMemcpyHtoD(peer_table_, peer_bases_.data(), sizeof(uint64_t) * peer_bases_.size()), "cuMemcpyHtoD",
          "writing the peer table");
    check(d.cuCtxSynchronize(), "cuCtxSynchronize", "finishing heap set-up");
    // No peer may write into this heap before it is zeroed.
    bootstrap.barrier("heap: cuda heaps zeroed");
  } catch (...) {
    release();
    throw;
  }
}

void CudaHeap::create_static(Bootstrap& bootstrap) {
  const cuda::Driver& d = cuda::driver();
  base_alignment_ = kStaticBaseAlignment;
  check(d.cuMemAlloc(&static_allocation_, size_ + kStaticBaseAlignment), "cuMemAlloc", "allocating the static heap");
  const CUdeviceptr base = round_up(static_allocation_, kStaticBaseAlignment);
  StaticHandle mine{};
  mine.base_offset = base - static_allocation_;
  check(d.cuIpcGetMemHandle(&mine.handle, static_allocation_), "cuIpcGetMemHandle", "exporting the heap");
  std::vector<StaticHandle> all(peer_bases_.size());
  bootstrap.allgather(&mine, all.data(), sizeof(StaticHandle), "heap: cuda ipc handles");
  peer_bases_[rank_] = reinterpret_cast<uint8_t*>(base);
  ipc_opened_.assign(peer_bases_.size(), 0);
  for (size_t pe = 0; pe < all.size(); ++pe) {
    if (static_cast<int>(pe) == rank_ || remote_[pe]) continue;  // remote PEs: through the device proxy
    check(d.cuIpcOpenMemHandle(&ipc_opened_[pe], all[pe].handle, cuda::kIpcLazyEnablePeerAccess),
          "cuIpcOpenMemHandle", "mapping a peer's heap");
    peer_bases_[pe] = reinterpret_cast<uint8_t*>(ipc_opened_[pe] + all[pe].base_offset);
  }
}

void CudaHeap::create_vmm(Bootstrap& bootstrap, double timeout_s) {
  const cuda::Driver& d = cuda::driver();
  const int ordinal = context_->ordinal();
  cuda::CUdevice device = 0;
  check(d.cuDeviceGet(&device, ordinal), "cuDeviceGet", "opening the GPU");
  int vmm = 0, posix_fd = 0;
  d.cuDeviceGetAttribute(&vmm, cuda::kAttrVmmSupported, device);
  d.cuDeviceGetAttribute(&posix_fd, cuda::kAttrPosixFdSupported, device);
  if (vmm == 0 || posix_fd == 0) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "MORI_SHMEM_MODE=vmm_heap: GPU ", ordinal,
                " does not support virtual memory management with POSIX fd export; use static_heap");
  }
  const cuda::CUmemAllocationProp prop = cuda::exportable_device_memory(ordinal);
  size_t granularity = 0;
  check(d.cuMemGetAllocationGranularity(&granularity, &prop, cuda::kGranularityRecommended),
        "cuMemGetAllocationGranularity", "sizing the vmm heap's chunks");
  const uint64_t requested_chunk = env::get_size("MORI_SHMEM_VMM_CHUNK_SIZE");
  chunk_size_ = round_up(requested_chunk != 0 ? requested_chunk : std::max<uint64_t>(kMinVmmChunk, granularity),
                         granularity);
  chunk_size_ = std::min(chunk_size_, round_up(size_, granularity));
  size_ = round_up(size_, chunk_size_);
  base_alignment_ = kVmmBaseAlignment;
  const size_t chunks = size_ / chunk_size_;

  cuda::CUmemAccessDesc access{};
  access.location.type = cuda::kMemLocationDevice;
  access.location.id = ordinal;
  access.flags = cuda::kAccessReadWrite;
  reserved_.assign(peer_bases_.size(), 0);
  auto map_range = [&](int pe, const std::vector<cuda::CUmemGenericAllocationHandle>& handles) {
    check(d.cuMemAddressReserve(&reserved_[pe], size_, kVmmBaseAlignment, 0, 0), "cuMemAddressReserve",
          "reserving the vmm heap's address range");
    for (size_t i = 0; i < handles.size(); ++i) {
      check(d.cuMemMap(reserved_[pe] + i * chunk_size_, chunk_size_, 0, handles[i], 0), "cuMemMap",
            "mapping a vmm heap chunk");
    }
    check(d.cuMemSetAccess(reserved_[pe], size_, &access, 1), "cuMemSetAccess", "enabling access to a vmm heap");
    peer_bases_[pe] = reinterpret_cast<uint8_t*>(reserved_[pe]);
  };

  std::vector<cuda::CUmemGenericAllocationHandle> own(chunks, 0);
  std::vector<int> fds(chunks, -1);
  for (size_t i = 0; i < chunks; ++i) {
    check(d.cuMemCreate(&own[i], chunk_size_, &prop, 0), "cuMemCreate", "allocating a vmm heap chunk");
    chunk_handles_.push_back(own[i]);
  }
  map_range(rank_, own);
  for (size_t i = 0; i < chunks; ++i) {
    check(d.cuMemExportToShareableHandle(&fds[i], own[i], cuda::kHandleTypePosixFd, 0),
          "cuMemExportToShareableHandle", "exporting a vmm heap chunk");
  }
  std::vector<std::vector<int>> received;
  try {
    received = cuda::exchange_fds(bootstrap, fds, timeout_s, remote_);  // remote PEs: through the device proxy
  } catch (...) {
    for (int fd : fds) close(fd);
    throw;
  }
  for (int fd : fds) close(fd);
  for (size_t pe = 0; pe < received.size(); ++pe) {
    if (static_cast<int>(pe) == rank_ || remote_[pe]) continue;
    std::vector<cuda::CUmemGenericAllocationHandle> imported(chunks, 0);
    for (size_t i = 0; i < chunks; ++i) {
      const cuda::CUresult result = d.cuMemImportFromShareableHandle(
          &imported[i], reinterpret_cast<void*>(static_cast<uintptr_t>(received[pe][i])), cuda::kHandleTypePosixFd);
      close(received[pe][i]);
      check(result, "cuMemImportFromShareableHandle", "importing a peer's vmm heap chunk");
      chunk_handles_.push_back(imported[i]);
    }
    map_range(static_cast<int>(pe), imported);
  }
}

mori_shmem_device_state_t CudaHeap::device_state(double spin_timeout_s) const {
  mori_shmem_device_state_t state{};
  state.version = MORI_SHMEM_DEVICE_STATE_VERSION;
  state.my_pe = rank_;
  state.n_pes = static_cast<int>(peer_bases_.size());
  state.heap_base = reinterpret_cast<uintptr_t>(local_base());
  state.heap_size = size_;
  state.peer_bases = peer_table_;
  state.spin_timeout_ns = static_cast<unsigned long long>(spin_timeout_s * 1e9);
  state.proxy_ring = proxy_ring_;
  for (size_t pe = 0; pe < peer_bases_.size() && pe < MORI_SHMEM_DEVICE_INLINE_PEERS; ++pe) {
    state.peer_base[pe] = reinterpret_cast<uintptr_t>(peer_bases_[pe]);
  }
  return state;
}

void CudaHeap::release() {
  const cuda::Driver& d = cuda::driver();
  context_->bind();
  // Errors are ignored here: this runs on teardown and after failures, where a second error would
  // hide the first; the process's CUDA context reclaims anything left.
  d.cuCtxSynchronize();
  if (peer_table_ != 0) d.cuMemFree(peer_table_);
  for (CUdeviceptr opened : ipc_opened_) {
    if (opened != 0) d.cuIpcCloseMemHandle(opened);
  }
  if (static_allocation_ != 0) d.cuMemFree(static_allocation_);
  for (CUdeviceptr range : reserved_) {
    if (range == 0) continue;
    d.cuMemUnmap(range, size_);
    d.cuMemAddressFree(range, size_);
  }
  for (cuda::CUmemGenericAllocationHandle handle : chunk_handles_) d.cuMemRelease(handle);
  peer_table_ = static_allocation_ = 0;
  ipc_opened_.clear();
  reserved_.clear();
  chunk_handles_.clear();
}

CudaHeap::~CudaHeap() { release(); }

}  // namespace mori::shmem
