// SPDX-License-Identifier: MIT
#include "heap/allocator.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace mori::shmem {

namespace {

bool is_power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) & ~(alignment - 1); }

}  // namespace

HeapAllocator::HeapAllocator(uint64_t capacity, uint64_t reserved)
    : capacity_(capacity), reserved_(align_up(reserved, kMinAlignment)) {
  if (reserved_ >= capacity_) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "heap size ", capacity_, " bytes is too small: the library reserves ",
                reserved_, " bytes at its start");
  }
  free_.emplace(reserved_, capacity_ - reserved_);
}

uint64_t HeapAllocator::allocate(uint64_t size, uint64_t alignment) {
  if (!is_power_of_two(alignment)) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "alignment ", alignment, " is not a power of two");
  }
  if (alignment > kMaxAlignment) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "alignment ", alignment, " exceeds the largest supported, ",
                kMaxAlignment, " bytes");
  }
  alignment = std::max(alignment, kMinAlignment);
  if (size > capacity_) {
    throw_error(MORI_SHMEM_ERR_HEAP_EXHAUSTED, "cannot allocate ", size, " bytes: the symmetric heap holds ",
                capacity_, " bytes in all (largest free block ", largest_free(), " bytes); raise MORI_SHMEM_HEAP_SIZE");
  }
  const uint64_t rounded = align_up(size, alignment);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t block_start = it->first;
    const uint64_t block_end = it->first + it->second;
    const uint64_t start = align_up(block_start, alignment);
    if (start + rounded > block_end) continue;
    free_.erase(it);
    if (start > block_start) free_.emplace(block_start, start - block_start);
    if (block_end > start + rounded) free_.emplace(start + rounded, block_end - (start + rounded));
    live_.emplace(start, rounded);
    used_ += rounded;
    return start;
  }
  throw_error(MORI_SHMEM_ERR_HEAP_EXHAUSTED, "cannot allocate ", size, " bytes (", rounded, " after aligning to ",
              alignment, "): the largest free block of the symmetric heap is ", largest_free(), " bytes, ", used_,
              " of ", capacity_ - reserved_, " usable bytes are in use by ", live_.size(),
              " allocations; free memory or raise MORI_SHMEM_HEAP_SIZE");
}

void HeapAllocator::release(uint64_t offset) {
  auto it = live_.find(offset);
  if (it == live_.end()) {
    throw_error(MORI_SHMEM_ERR_INVALID_POINTER, "heap offset ", offset,
                " is not the start of a live allocation (double free, or a pointer shmem_malloc did not return)");
  }
  const uint64_t size = it->second;
  live_.erase(it);
  used_ -= size;
  insert_free(offset, size);
}

void HeapAllocator::insert_free(uint64_t offset, uint64_t size) {
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += size;
      return;
    }
  }
  free_.emplace(offset, size);
}

uint64_t HeapAllocator::live_size(uint64_t offset) const {
  auto it = live_.find(offset);
  return it == live_.end() ? 0 : it->second;
}

uint64_t HeapAllocator::largest_free() const {
  uint64_t largest = 0;
  for (const auto& [offset, size] : free_) largest = std::max(largest, size);
  return largest;
}

}  // namespace mori::shmem
