// SPDX-License-Identifier: MIT
// The RDMA backend's control connection to one remote engine: the same authenticated control
// channel the TCP backend's links use (net/protocol.hpp), carrying RDMA_CONNECT, RDMA_KEY and
// PING, one request at a time. Any socket or protocol error closes it; the owner opens a new one.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "core/remote.hpp"
#include "core/status.hpp"
#include "net/protocol.hpp"
#include "net/socket.hpp"

namespace mori::io::ucx {

class ControlChannel {
 public:
  // Connects and authenticates within timeout_ms; throws Error(Connection/Authentication/...).
  ControlChannel(const std::string& local_key, const RemoteEngine& remote, int64_t timeout_ms);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  using Answer = net::ControlAnswer;  // its payload at most wire::kMaxAnswerBytes
  // One round trip within timeout_ms; throws Error (and closes the channel) when the peer does
  // not answer in time, closes the connection or breaks the protocol.
  Answer request(net::FrameType type, uint32_t mem_id, int64_t timeout_ms);
  bool closed() const { return closed_.load(); }
  const std::string& describe() const { return description_; }

 private:
  std::string description_;
  net::Socket socket_;
  std::mutex mutex_;
  std::atomic<bool> closed_{false};
};

}  // namespace mori::io::ucx
