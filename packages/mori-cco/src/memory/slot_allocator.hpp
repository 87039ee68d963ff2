// SPDX-License-Identifier: MIT
// Hands out ranges of a rank's slot. Every rank runs the same sequence of calls, and the allocator
// is deterministic (first fit, lowest offset), so an allocation lands at the same offset in every
// slot without any exchange; the communicator still cross-checks sizes to catch asymmetric calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace mori::cco {

class SlotAllocator {
 public:
  explicit SlotAllocator(uint64_t capacity);
  // The offset of a new block of `size` bytes aligned to `alignment` (a power of two), or none.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t alignment);
  // Returns the block's size; 0 when offset does not start a live block.
  uint64_t release(uint64_t offset);
  // The live block containing offset: (start, size), or none.
  std::optional<std::pair<uint64_t, uint64_t>> block_at(uint64_t offset) const;
  uint64_t high_water() const;  // end of the highest live block
  uint64_t capacity() const { return capacity_; }
  uint64_t largest_free() const;

 private:
  uint64_t capacity_;
  std::map<uint64_t, uint64_t> free_;  // offset -> size, coalesced
  std::map<uint64_t, uint64_t> live_;  // offset -> size
};

}  // namespace mori::cco
