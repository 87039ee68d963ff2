// SPDX-License-Identifier: MIT
// NOTE [cuda heap]
// On the cuda backend each PE's heap is GPU memory and every peer's heap is mapped into each PE's
// address space, so a kernel loads and stores a peer's copy directly (same GPU under MPS, or
// another GPU over NVLink/PCIe peer access). Two ways to back it (MORI_SHMEM_MODE):
//   static_heap  one cuMemAlloc, shared with cuIpcGetMemHandle / cuIpcOpenMemHandle;
//   vmm_heap     a reserved virtual range backed by cuMemCreate chunks, shared as POSIX fds
//                (cuMemExportToShareableHandle) passed over Unix sockets, and mapped by every peer.
// Either way one exchange at init makes every later sub-allocation reachable: a peer's copy of
// heap offset o is peer_base(pe) + o, with no per-allocation handshake.
#pragma once

#include <memory>
#include <vector>

#include "cuda/context.hpp"
#include "heap/symmetric_heap.hpp"
#include "mori_shmem/device_state.h"

namespace mori::shmem {

class CudaHeap final : public SymmetricHeap {
 public:
  enum class Mode { Static, Vmm };

  // COLLECTIVE over bootstrap. size is rounded up to the mode's granularity. Zeroes the library's
  // sync words on every PE before returning.
  // PEs that topology marks remote are not mapped (peer_base nullptr): the remote transport and
  // the device proxy reach them.
  // timeout_s bounds the handle exchange, wait_timeout_s every later wait for the GPU's copies.
  CudaHeap(Bootstrap& bootstrap, uint64_t size, Mode mode, int device, double timeout_s, double wait_timeout_s,
           const Topology& topology);
  ~CudaHeap() override;
  CudaHeap(const CudaHeap&) = delete;
  CudaHeap& operator=(const CudaHeap&) = delete;

  const char* backend() const override { return "cuda"; }
  uint8_t* local_base() const override { return peer_bases_[rank_]; }
  uint8_t* peer_base(int pe) const override { return peer_bases_[pe]; }
  uint64_t size() const override { return size_; }
  uint64_t base_alignment() const override { return base_alignment_; }

  Mode mode() const { return mode_; }
  const cuda::DeviceContext& context() const { return *context_; }
  // The state kernels need (mori_shmem_device_state_t), peer table included.
  mori_shmem_device_state_t device_state(double spin_timeout_s) const;
  // Device address of the device proxy's ring, published in the device state (0: none).
  void set_proxy_ring(uint64_t address) { proxy_ring_ = address; }

 private:
  void create_static(Bootstrap& bootstrap);
  void create_vmm(Bootstrap& bootstrap, double timeout_s);
  void release();

  std::unique_ptr<cuda::DeviceContext> context_;
  Mode mode_;
  int rank_;
  uint64_t size_;
  uint64_t base_alignment_ = 0;
  std::vector<uint8_t*> peer_bases_;
  // static_heap: the local allocation and the IPC-opened peer allocations (their bases).
  cuda::CUdeviceptr static_allocation_ = 0;
  std::vector<cuda::CUdeviceptr> ipc_opened_;
  // vmm_heap: one reserved range per PE and the chunk handles mapped into it.
  uint64_t chunk_size_ = 0;
  std::vector<cuda::CUdeviceptr> reserved_;
  std::vector<cuda::CUmemGenericAllocationHandle> chunk_handles_;
  cuda::CUdeviceptr peer_table_ = 0;  // device copy of peer_bases_
  std::vector<uint8_t> remote_;        // by PE: reached through the remote transport
  uint64_t proxy_ring_ = 0;
};

CudaHeap::Mode parse_cuda_heap_mode(const std::string& setting);

}  // namespace mori::shmem
