// SPDX-License-Identifier: MIT
#include "memory/slot_allocator.hpp"

#include <algorithm>

namespace mori::cco {

SlotAllocator::SlotAllocator(uint64_t capacity) : capacity_(capacity) {
  if (capacity > 0) free_[0] = capacity;
}

std::optional<uint64_t> SlotAllocator::allocate(uint64_t size, uint64_t alignment) {
  if (size == 0) size = 1;
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t end = start + it->second;
    const uint64_t aligned = (start + alignment - 1) & ~(alignment - 1);
    if (aligned > end || end - aligned < size) continue;
    free_.erase(it);
    if (aligned > start) free_[start] = aligned - start;
    if (aligned + size < end) free_[aligned + size] = end - (aligned + size);
    live_[aligned] = size;
    return aligned;
  }
  return std::nullopt;
}

uint64_t SlotAllocator::release(uint64_t offset) {
  const auto live = live_.find(offset);
  if (live == live_.end()) return 0;
  const uint64_t size = live->second;
  live_.erase(live);
  uint64_t start = offset;
  uint64_t length = size;
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = length;
  return size;
}

std::optional<std::pair<uint64_t, uint64_t>> SlotAllocator::block_at(uint64_t offset) const {
  auto it = live_.upper_bound(offset);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (offset >= it->first + it->second) return std::nullopt;
  return std::make_pair(it->first, it->second);
}

uint64_t SlotAllocator::high_water() const {
  return live_.empty() ? 0 : live_.rbegin()->first + live_.rbegin()->second;
}

uint64_t SlotAllocator::largest_free() const {
  uint64_t best = 0;
  for (const auto& [offset, size] : free_) best = std::max(best, size);
  return best;
}

}  // namespace mori::cco
