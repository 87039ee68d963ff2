// SPDX-License-Identifier: MIT
#include "remote/signal_joins.hpp"

#include "core/error.hpp"

namespace mori::shmem::remote {

bool SignalJoins::arrived(int pe, uint64_t id, uint32_t parts) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(pe, id);
  auto it = open_.find(key);
  if (it == open_.end()) {
    size_t& open = open_per_pe_[pe];
    if (open >= kMaxOpenJoins) {
      throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "PE ", pe, " holds ", open,
                  " put-with-signal joins open, the limit (parts that never came)");
    }
    ++open;
    open_.emplace(key, Open{parts, 1});
    return false;
  }
  if (it->second.parts != parts) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "a put-with-signal part of join ", id, " says parts=", parts,
                " where its first part said ", it->second.parts);
  }
  if (++it->second.arrived < parts) return false;
  open_.erase(it);
  if (--open_per_pe_[pe] == 0) open_per_pe_.erase(pe);
  return true;
}

}  // namespace mori::shmem::remote
