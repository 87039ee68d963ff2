// SPDX-License-Identifier: MIT
// A remote region (mori_shmem.h, "remote regions"): the remote transport of NOTE [remote
// transport] serving one caller-chosen memory range per rank of a bootstrap group, instead of the
// symmetric heap. Libraries with memory of their own (mori-cco's slots) reach other hosts with it;
// on GPU memory it brings the staging and a device proxy, whose ring kernels post to.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "cuda/context.hpp"
#include "remote/conduit.hpp"
#include "remote/device_proxy.hpp"
#include "remote/gpu_remote_io.hpp"
#include "remote/heap_access.hpp"

namespace mori::shmem::remote {

struct RegionSpec {
  uint8_t* base = nullptr;      // this rank's range
  uint64_t size = 0;            // the same on every rank
  int cuda_device = -1;         // -1: host memory; else the ordinal of the GPU that holds it
  std::vector<uint8_t> reach;   // reach[r] != 0: rank r is served through the region
  uint64_t proxy_words = 0;     // GPU memory: offset of the proxy's words (mori_shmem.h, remote regions)
};

class RemoteRegion {
 public:
  // COLLECTIVE over bootstrap; reach must be transpose-consistent (r reaches q iff q reaches r).
  RemoteRegion(Bootstrap& bootstrap, RegionSpec spec, double timeout_s);
  ~RemoteRegion();
  RemoteRegion(const RemoteRegion&) = delete;
  RemoteRegion& operator=(const RemoteRegion&) = delete;

  // Offsets are offsets in the target rank's range; every call checks rank and range first.
  void put(int rank, uint64_t offset, const void* src, uint64_t nbytes);
  void put_signal(int rank, uint64_t offset, const void* src, uint64_t nbytes, uint64_t signal_offset,
                  uint64_t signal, int sig_op);
  void get(int rank, uint64_t offset, void* dest, uint64_t nbytes);
  void signal(int rank, uint64_t signal_offset, uint64_t signal, int sig_op);
  // Every request issued before it, by host threads or (GPU memory) by kernels, is applied.
  void quiet();
  uint64_t proxy_ring() const { return proxy_ ? proxy_->ring_address() : 0; }
  const char* conduit_name() const { return conduit_->name(); }

 private:
  void check(int rank, uint64_t offset, uint64_t nbytes, uint64_t align, const char* what) const;

  int rank_;
  RegionSpec spec_;
  std::unique_ptr<cuda::DeviceContext> context_;
  GpuRemoteIo* gpu_io_ = nullptr;
  std::unique_ptr<HeapAccess> access_;
  std::unique_ptr<Conduit> conduit_;
  std::unique_ptr<DeviceProxy> proxy_;
};

}  // namespace mori::shmem::remote
