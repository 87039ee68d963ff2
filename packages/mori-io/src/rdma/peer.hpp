// SPDX-License-Identifier: MIT
// State the RDMA backend keeps per remote engine and per transfer. Fields marked "worker" are
// read and written on the worker thread only; the rest are set before the object is shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/memory.hpp"
#include "core/status.hpp"
#include "net/socket.hpp"
#include "ucx/control.hpp"
#include "rdma/plan.hpp"
#include "ucx/loader.hpp"
#include "ucx/wire.hpp"

namespace mori::io::ucx {

// A region of the remote engine, as its owner described it over the control connection.
struct RemoteRegion {
  uint32_t id = 0;
  uint64_t base = 0;
  uint64_t size = 0;
  std::string packed;             // the rkey as the owner packed it
  std::vector<ucp_rkey_h> rkeys;  // one per lane, unpacked on that lane's endpoint (worker)
};

struct Peer {
  void* owner = nullptr;  // the backend, for UCX's endpoint-error callback
  std::string key;
  std::string description;  // "engine 'B' at host:port"
  wire::Token token{};
  std::unique_ptr<ControlChannel> control;
  std::atomic<bool> dead{false};  // torn down: the next transfer connects anew

  std::mutex memories_mutex;
  std::map<uint32_t, std::shared_ptr<RemoteRegion>> memories;
  std::vector<std::shared_ptr<RemoteRegion>> retired;  // replaced, rkeys destroyed with the peer's

  // worker
  std::vector<ucp_ep_h> eps;  // the lanes; emptied when closed
  int inflight = 0;           // UCX requests outstanding on the lanes
  int closing = 0;            // ep close requests outstanding
  bool torn_down = false;
  bool rkeys_destroyed = false;
};

enum class Stage { Post, Flush, Notify, Done };

struct Op {
  void* owner = nullptr;  // the backend, for UCX's completion callbacks
  uint64_t seq = 0;       // matches the target's acknowledgement
  bool is_read = false;
  uint64_t uid = 0;
  std::shared_ptr<TransferStatus> status;
  RegionPin pin;  // the local region, until every UCX request on it is done
  uintptr_t local_base = 0;
  ucp_mem_h memh = nullptr;
  int device = -1;  // the CUDA device of GPU memory, else -1
  std::shared_ptr<Peer> peer;
  std::shared_ptr<RemoteRegion> remote;
  std::vector<Piece> pieces;
  Fallback fallback;
  net::Deadline deadline = net::never();
  int64_t timeout_ms = 0;

  // worker
  size_t next = 0;  // first piece not yet posted
  Stage stage = Stage::Post;
  bool stage_started = false;
  int outstanding = 0;
  bool ack_pending = false;
  uint64_t lanes_used = 0;  // bit per lane that carried a write, to flush
  bool scheduled = false;
  bool timed_out = false;
  StatusCode error = StatusCode::SUCCESS;
  std::string message;
  bool may_fall_back = true;
  uint8_t notify[wire::kNotifyBytes] = {};

  // Records the first failure; may_fall_back says whether a TCP retry may still help.
  void fail(StatusCode code, const std::string& why, bool fall_back) {
    if (error != StatusCode::SUCCESS) return;
    error = code;
    message = why;
    may_fall_back = fall_back;
  }
};

}  // namespace mori::io::ucx
