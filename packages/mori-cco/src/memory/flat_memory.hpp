// SPDX-License-Identifier: MIT
// The flat virtual address range of a communicator (see dev_comm.h): one slot of per_rank_size
// bytes per LSA rank, back to back, the same layout in every member. The backends differ only in
// what backs a slot: POSIX shared memory (cpu) or CUDA VMM allocations shared by fd (cuda).
#pragma once

#include <cstdint>
#include <memory>

#include "core/group.hpp"

namespace mori::cco {

class FlatMemory {
 public:
  virtual ~FlatMemory() = default;
  virtual const char* backend() const = 0;  // "cpu" or "cuda"
  virtual int device() const = 0;           // CUDA ordinal, -1 on the cpu backend
  virtual uintptr_t flat_base() const = 0;  // this process's address of LSA rank 0's slot
  virtual uint64_t per_rank_size() const = 0;
  // Allocation granularity: commit() ends and allocation alignments are multiples of it.
  virtual uint64_t granularity() const = 0;
  // COLLECTIVE, same `end` on every rank: backs and maps [0, end) of every LSA rank's slot.
  // Never shrinks; a call at or below committed() does nothing. Throws HEAP_EXHAUSTED when the
  // backing store cannot grow.
  virtual void commit(uint64_t end) = 0;
  virtual uint64_t committed() const = 0;
  // Zeroes [offset, offset + size) of this rank's own slot (synchronously).
  virtual void zero(uint64_t offset, uint64_t size) = 0;
  // Reads the 8-byte word at offset of this rank's own slot (synchronously); the host can load
  // cpu memory directly, GPU memory needs a copy.
  virtual uint64_t read_word(uint64_t offset) {
    return __atomic_load_n(reinterpret_cast<const uint64_t*>(flat_base() + own_slot_offset() + offset),
                           __ATOMIC_ACQUIRE);
  }

 protected:
  virtual uint64_t own_slot_offset() const = 0;  // lsa_rank * per_rank_size
};

// The cpu backend. per_rank_size is rounded up to the page size.
std::unique_ptr<FlatMemory> create_shm_memory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size);
// The cuda backend on device `device` (the LSA team must be this host's ranks, which share fds).
// per_rank_size is rounded up to the VMM granularity. Throws UNSUPPORTED naming the reason when
// there is no driver, no such device, or the device lacks VMM / POSIX-fd handle support.
std::unique_ptr<FlatMemory> create_vmm_memory(Group& group, int lsa_rank, int lsa_size, uint64_t per_rank_size,
                                              int device);

}  // namespace mori::cco
