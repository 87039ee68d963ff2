// SPDX-License-Identifier: MIT
// The one interface every transport implements (tcp/, p2p/, rdma/). The engine (engine/) holds
// its backends in one route chain, P2P then RDMA then TCP: a transfer goes to the first backend
// whose can_route() takes the pair, and when that backend cannot start it, or fails it later, to
// the next one (engine/route.cpp). A backend knows nothing of the others nor of the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "core/remote.hpp"
#include "core/segment.hpp"
#include "core/status.hpp"

namespace mori::io {

// MORI's BackendType values (XGMI: the P2P backend between GPUs of one host).
enum class BackendType : int { Unknown = 0, XGMI = 1, RDMA = 2, TCP = 3, FABRIC = 4 };

// Called once, off the caller's thread, when a started transfer failed in a way the next
// backend may still fix (no byte of the destination is written by this backend any more).
using Fallback = std::function<void(const std::string& reason)>;

// One transfer as the engine hands it to a backend: offsets and sizes already checked against
// the local region and the remote MemoryDesc. Valid for the duration of submit(); a backend
// copies what it keeps.
struct TransferRequest {
  bool is_read = false;
  std::shared_ptr<Region> local;
  const RemoteEngine* engine = nullptr;
  Placement placement;
  const RemoteMemory* memory = nullptr;
  const std::vector<Segment>* segments = nullptr;
  uint64_t total = 0;  // bytes over all segments
  uint64_t uid = 0;
  std::shared_ptr<TransferStatus> status;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendType type() const = 0;

  // Whether this backend can move bytes between the request's two sides at all; false passes the
  // transfer to the next backend of the chain without trying.
  virtual bool can_route(const TransferRequest& request) const = 0;

  // Starts the transfer. true: from then on the status completes, or, when the backend fails
  // over, it took `fallback` and calls it once with the reason. false with *why: nothing moved
  // and `fallback` is untouched; *repeated says the backend already logged this reason for the
  // peer. A backend may also finish the status itself (a final error no other backend could fix)
  // and return true.
  virtual bool submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) = 0;

  // Memory registration: a backend that must register memory with its transport does it here
  // (failures only send the region's transfers to another backend).
  virtual void map_region(const std::shared_ptr<Region>& region) { (void)region; }
  // Called once nothing uses region id any more.
  virtual void unmap_region(uint32_t id) { (void)id; }
  // Deregistration of region id timed out: cut whatever still moves its bytes.
  virtual void abort_users_of(uint32_t id) { (void)id; }
  // How long a transfer of this backend may run (its op_timeout_ms; 0: this backend's transfers
  // do not hold deregistration up).
  virtual int64_t op_timeout_ms() const { return 0; }

  // A remote engine was registered anew (deregistered: false) or deregistered: drop what is
  // cached of it; its transfers in flight fail.
  virtual void forget_remote(const std::string& key, const std::string& reason, bool deregistered) {
    (void)key;
    (void)reason;
    (void)deregistered;
  }

  // Fails (or, P2P, finishes) what is in flight and releases every resource; idempotent.
  virtual void stop(const std::string& reason) = 0;
};

}  // namespace mori::io
