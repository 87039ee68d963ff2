// SPDX-License-Identifier: MIT
// NOTE [CPU heap]
// On the CPU backend each PE owns one POSIX shared-memory segment of MORI_SHMEM_HEAP_SIZE bytes
// and maps every peer's segment too, so a "remote" put is a memcpy into the peer's mapping. The
// segments are unlinked as soon as every PE has mapped them: they vanish with the processes even
// when a PE crashes, and nothing is left behind in /dev/shm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heap/symmetric_heap.hpp"

namespace mori::shmem {

// Every mapping of a heap starts at a multiple of this, the largest alignment malloc_align takes.
constexpr uint64_t kHeapBaseAlignment = uint64_t(1) << 30;

class SharedMemoryHeap final : public SymmetricHeap {
 public:
  // COLLECTIVE over bootstrap. Maps the segments of the PEs that are not remote (topology.remote);
  // peer_base is nullptr for the others, which the remote transport reaches.
  SharedMemoryHeap(Bootstrap& bootstrap, uint64_t size, const Topology& topology);
  ~SharedMemoryHeap();
  SharedMemoryHeap(const SharedMemoryHeap&) = delete;
  SharedMemoryHeap& operator=(const SharedMemoryHeap&) = delete;

  const char* backend() const override { return "cpu"; }
  uint8_t* local_base() const override { return mappings_[rank_]; }
  uint8_t* peer_base(int pe) const override { return mappings_[pe]; }
  uint64_t size() const override { return size_; }
  uint64_t base_alignment() const override { return kHeapBaseAlignment; }

 private:
  int rank_;
  uint64_t size_;
  std::vector<uint8_t*> mappings_;
};

}  // namespace mori::shmem
