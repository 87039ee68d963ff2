// SPDX-License-Identifier: MIT
// What the allocator, the RMA paths and the C ABI need of a symmetric heap, whatever backs it:
// POSIX shared memory (cpu backend) or GPU memory shared by CUDA IPC / VMM (cuda backend). Every
// PE's heap has the same size, and peer_base(pe) + offset is PE pe's copy of offset.
#pragma once

#include <cstdint>
#include <vector>

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

// Which PEs this PE can load/store (same host, P2P allowed) and which it reaches through the
// remote transport. A PE's node is its host (kernel boot id + hostname), or MORI_NODE_ID, or
// rank / MORI_SHMEM_PES_PER_NODE when that is set (one host standing for several); a PE with
// MORI_DISABLE_P2P is remote to every other PE. The relation is symmetric by construction.
struct Topology {
  std::vector<uint8_t> remote;  // by PE: 1 = through the remote transport
  bool any_remote = false;      // some pair of PEs of the job (not only this PE's) is remote
};

// COLLECTIVE over bootstrap.
Topology exchange_topology(Bootstrap& bootstrap);

}  // namespace mori::shmem
