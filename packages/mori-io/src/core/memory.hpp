// SPDX-License-Identifier: MIT
// Registered memory. A region is looked up and pinned in one step under the table lock, so
// deregistration can remove it and then wait until no IO thread still reads or writes it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace mori::io {

enum class MemoryLocation : int { Unknown = 0, CPU = 1, GPU = 2 };

struct Region {
  uint32_t id = 0;
  uintptr_t base = 0;
  uint64_t size = 0;
  MemoryLocation loc = MemoryLocation::CPU;
  int device = -1;

  std::mutex mutex;
  std::condition_variable idle;
  int users = 0;

  // True when [offset, offset + len) lies inside the region (written so it cannot overflow).
  bool contains(uint64_t offset, uint64_t len) const { return offset <= size && len <= size - offset; }
  char* at(uint64_t offset) const { return reinterpret_cast<char*>(base + offset); }
};

// Keeps a region's memory in use; deregistration waits for every pin to go.
class RegionPin {
 public:
  RegionPin() = default;
  explicit RegionPin(std::shared_ptr<Region> region) : region_(std::move(region)) {
    if (region_) {
      std::lock_guard<std::mutex> lock(region_->mutex);
      ++region_->users;
    }
  }
  RegionPin(RegionPin&& other) noexcept = default;
  RegionPin& operator=(RegionPin&& other) noexcept {
    if (this != &other) {
      release();
      region_ = std::move(other.region_);
    }
    return *this;
  }
  RegionPin(const RegionPin&) = delete;
  RegionPin& operator=(const RegionPin&) = delete;
  ~RegionPin() { release(); }

  Region* get() const { return region_.get(); }
  const std::shared_ptr<Region>& shared() const { return region_; }
  explicit operator bool() const { return static_cast<bool>(region_); }

 private:
  void release() {
    if (!region_) return;
    {
      std::lock_guard<std::mutex> lock(region_->mutex);
      --region_->users;
    }
    region_->idle.notify_all();
    region_.reset();
  }
  std::shared_ptr<Region> region_;
};

class RegionTable {
 public:
  std::shared_ptr<Region> add(uintptr_t base, uint64_t size, MemoryLocation loc, int device) {
    auto region = std::make_shared<Region>();
    region->base = base;
    region->size = size;
    region->loc = loc;
    region->device = device;
    std::lock_guard<std::mutex> lock(mutex_);
    region->id = next_id_++;
    regions_[region->id] = region;
    return region;
  }

  // A pin on region id, or an empty pin when it is not (or no longer) registered.
  RegionPin pin(uint32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(id);
    return it == regions_.end() ? RegionPin() : RegionPin(it->second);
  }

  std::shared_ptr<Region> remove(uint32_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.find(id);
    if (it == regions_.end()) return nullptr;
    auto region = it->second;
    regions_.erase(it);
    return region;
  }

  size_t count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return regions_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<Region>> regions_;
  uint32_t next_id_ = 0;
};

}  // namespace mori::io
