// SPDX-License-Identifier: MIT
// NOTE [wire] server: pool members only, a thread per connection, bounded as NOTE [pool
// authentication] asks of every listener (handshakes at once, connections, time, frame size).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "wire/protocol.hpp"
#include "wire/socket_io.hpp"

namespace mori::umbp::wire {

// What a call answers: its status (0, or a gRPC status code) and its body (or the error's text).
using Answer = std::pair<uint8_t, std::string>;
// Serves one call of the member `node` (UTF-8): its method's name (bytes as sent) and its request body.
using Dispatch = std::function<Answer(const std::string& node, const std::string& name, std::string body)>;
// Told why a connection ended on an error of this side (not the caller's going away, timing out
// or breaking the protocol), from the connection's thread; the connection is closed after.
using Report = std::function<void(const std::string& node, const std::string& why)>;

class Server {
 public:
  // A handshake must end within handshake_timeout_s; a connection idle for idle_timeout_s is closed.
  Server(std::string secret, const std::string& host, size_t max_connections, double handshake_timeout_s,
         double idle_timeout_s, Dispatch dispatch, Report report);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return port_; }
  // Closes the listener and every connection, and waits for their threads (a call in flight
  // finishes first and gets no answer).
  void stop();

 private:
  void accept_loop();
  void serve(Fd conn);
  // The member's node id, its frame keys set; false where the caller is refused or went away.
  bool handshake(int fd, Reader& reader, std::string* node, FrameKeys* keys);
  void frames(int fd, Reader& reader, const std::string& node, const FrameKeys& keys);
  void end_connection(int fd, bool handshaking);

  const std::string secret_;
  const size_t max_connections_;
  const double handshake_timeout_s_;
  const double idle_timeout_s_;
  const Dispatch dispatch_;
  const Report report_;
  Fd listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable idle_;
  std::set<int> live_;  // connections' descriptors, shut down by stop()
  size_t handshakes_ = 0;
  std::thread acceptor_;
};

}  // namespace mori::umbp::wire
