// SPDX-License-Identifier: MIT
// How a communicator reaches ranks on other nodes (its GDA path): a mori-shmem remote region over
// this rank's slot, so a peer's slot offset is the remote offset. On the cuda backend the region
// brings a device proxy: kernels post requests to its ring (mori_cco/device/gda.cuh), its thread
// carries them out. The proxy's ticket and error words live at `words_offset` of the slot.
#pragma once

#include <cstdint>
#include <vector>

#include "core/group.hpp"
#include "mori_shmem/mori_shmem.h"

namespace mori::cco {

class GdaTransport {
 public:
  // COLLECTIVE over group. reach[r] != 0 for the ranks on other nodes. cuda_device -1: host memory.
  GdaTransport(Group& group, uint8_t* slot, uint64_t slot_size, int cuda_device, const std::vector<uint8_t>& reach,
               uint64_t words_offset, double timeout_s);
  ~GdaTransport();
  GdaTransport(const GdaTransport&) = delete;
  GdaTransport& operator=(const GdaTransport&) = delete;

  // signal_offset UINT64_MAX: no signal; else the peer's word there gets += signal after the data.
  void put(int rank, uint64_t offset, const void* src, uint64_t bytes, uint64_t signal_offset, uint64_t signal);
  void get(int rank, uint64_t offset, void* dest, uint64_t bytes);
  void signal_add(int rank, uint64_t signal_offset, uint64_t value);
  void quiet();
  uint64_t proxy_ring() const { return proxy_ring_; }
  const char* conduit() const { return conduit_; }

 private:
  mori_shmem_remote_region_t region_ = nullptr;
  uint64_t proxy_ring_ = 0;
  const char* conduit_ = "";
};

}  // namespace mori::cco
