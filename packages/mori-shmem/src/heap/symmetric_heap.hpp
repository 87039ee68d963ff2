// SPDX-License-Identifier: MIT
// What the allocator, the RMA paths and the C ABI need of a symmetric heap, whatever backs it:
// POSIX shared memory (cpu backend) or GPU memory shared by CUDA IPC / VMM (cuda backend). Every
// PE's heap has the same size, and peer_base(pe) + offset is PE pe's copy of offset.
#pragma once

#include <cstdint>

#include "bootstrap/bootstrap.hpp"

namespace mori::shmem {

class SymmetricHeap {
 public:
  virtual ~SymmetricHeap() = default;
  virtual const char* backend() const = 0;  // "cpu" or "cuda"
  virtual uint8_t* local_base() const = 0;
  // PE pe's heap as mapped in this process; nullptr when it cannot be loaded/stored from here.
  virtual uint8_t* peer_base(int pe) const = 0;
  virtual uint64_t size() const = 0;
  // Every mapping's base is a multiple of this, so it bounds malloc_align's alignment.
  virtual uint64_t base_alignment() const = 0;
};

// COLLECTIVE. Throws MORI_SHMEM_ERR_UNSUPPORTED naming the first PE on another host; `why` says
// what needs one host (the heap's sharing mechanism).
void require_one_host(Bootstrap& bootstrap, const char* why);

}  // namespace mori::shmem
