// SPDX-License-Identifier: MIT
#pragma once

#include <mutex>
#include <utility>

namespace mori::io {

// Removes `key` from `map` under `mutex` and hands back what it held (an empty value when it held
// nothing), so that the caller tears the entry down without holding the lock.
template <typename Map>
typename Map::mapped_type take_locked(std::mutex& mutex, Map& map, const typename Map::key_type& key) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = map.find(key);
  if (it == map.end()) return {};
  typename Map::mapped_type value = std::move(it->second);
  map.erase(it);
  return value;
}

}  // namespace mori::io
