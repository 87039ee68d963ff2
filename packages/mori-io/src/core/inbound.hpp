// SPDX-License-Identifier: MIT
// Target-side record of transfers other engines made into (or out of) this engine's memory, so
// the application can ask "has initiator K's transfer uid landed?". Each frame of a transfer
// carries the transfer's frame count; the transfer is done once that many frames were served.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/status.hpp"

namespace mori::io {

class InboundTable {
 public:
  explicit InboundTable(size_t max_per_peer) : max_per_peer_(max_per_peer) {}

  void record(const std::string& peer, uint64_t uid, uint32_t total, StatusCode code, const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& transfers = peers_[peer];
    auto it = transfers.find(uid);
    if (it == transfers.end() || it->second.done == it->second.total) {
      // A finished entry under the same uid means the initiator reused the uid: start anew.
      if (it == transfers.end() && transfers.size() >= max_per_peer_) {
        transfers.erase(transfers.begin());  // uids grow per initiator: the smallest is the oldest
      }
      Entry fresh;
      fresh.total = total;
      it = transfers.insert_or_assign(uid, fresh).first;
    }
    Entry& entry = it->second;
    ++entry.done;
    if (is_error(code) && !is_error(entry.code)) {
      entry.code = code;
      entry.message = message;
    }
    if (entry.done == entry.total && !is_error(entry.code)) entry.code = StatusCode::SUCCESS;
  }

  // The transfer's state, removed once it is final; nullopt when nothing of it arrived yet.
  std::optional<std::pair<StatusCode, std::string>> pop(const std::string& peer, uint64_t uid) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto peer_it = peers_.find(peer);
    if (peer_it == peers_.end()) return std::nullopt;
    auto it = peer_it->second.find(uid);
    if (it == peer_it->second.end()) return std::nullopt;
    Entry entry = it->second;
    if (entry.done < entry.total) return std::make_pair(StatusCode::IN_PROGRESS, std::string());
    peer_it->second.erase(it);
    return std::make_pair(entry.code, entry.message);
  }

 private:
  struct Entry {
    uint32_t total = 0;
    uint32_t done = 0;
    StatusCode code = StatusCode::IN_PROGRESS;
    std::string message;
  };
  size_t max_per_peer_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::map<uint64_t, Entry>> peers_;
};

}  // namespace mori::io
