// SPDX-License-Identifier: MIT
// NOTE [symmetric allocation]
// The allocator hands out offsets into the heap, never addresses: every PE runs the same
// allocator over a heap of the same size, so the same sequence of malloc/free calls yields the
// same offsets everywhere. That is what makes an address symmetric without any per-allocation
// exchange. The allocator is deterministic (first fit by address) for this reason.
#pragma once

#include <cstdint>
#include <map>

namespace mori::shmem {

class HeapAllocator {
 public:
  static constexpr uint64_t kMinAlignment = 256;
  static constexpr uint64_t kMaxAlignment = uint64_t(1) << 30;  // = kHeapBaseAlignment of the mappings

  // Manages [reserved, capacity); reserved bytes at the start belong to the library.
  HeapAllocator(uint64_t capacity, uint64_t reserved);

  // Returns the offset of a block of at least `size` bytes aligned to `alignment` (a power of
  // two; raised to kMinAlignment). size is rounded up to the alignment. Throws
  // MORI_SHMEM_ERR_HEAP_EXHAUSTED naming the request, the largest free block and the capacity.
  uint64_t allocate(uint64_t size, uint64_t alignment);

  // Frees the block that starts at offset. Throws MORI_SHMEM_ERR_INVALID_POINTER when offset is
  // not the start of a live block (double free, or an offset allocate never returned).
  void release(uint64_t offset);

  // Size of the live block starting at offset, or 0.
  uint64_t live_size(uint64_t offset) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t reserved() const { return reserved_; }
  uint64_t used() const { return used_; }
  uint64_t largest_free() const;
  uint64_t num_allocations() const { return live_.size(); }

 private:
  void insert_free(uint64_t offset, uint64_t size);

  uint64_t capacity_;
  uint64_t reserved_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced: no two blocks touch
  std::map<uint64_t, uint64_t> live_;  // offset -> size
};

}  // namespace mori::shmem
