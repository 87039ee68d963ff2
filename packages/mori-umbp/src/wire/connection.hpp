// SPDX-License-Identifier: MIT
// NOTE [wire] caller: one connection past the handshake, one call in flight at a time.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "wire/protocol.hpp"
#include "wire/socket_io.hpp"

namespace mori::umbp::wire {

// What answered is not a mori-umbp wire server (nothing was sent): the caller makes gRPC calls.
struct NotAServer : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The server refused the pool credential, or did not prove the secret back.
struct Unauthenticated : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Connection {
 public:
  // Connected and past the handshake by the deadline.
  Connection(const std::string& host, uint16_t port, const std::string& node, std::string_view secret,
             Deadline deadline);

  void send(std::string_view name, std::string_view body, Deadline deadline);
  // The answer to the request send() wrote last: its status and body.
  std::pair<uint8_t, std::string> receive(Deadline deadline);
  void close() { fd_.close(); }
  bool closed() const { return fd_.get() < 0; }
  // The next request's sequence number: how many calls this connection has answered.
  uint64_t seq() const { return seq_; }

 private:
  Fd fd_;
  Reader reader_;
  FrameKeys keys_;
  uint64_t seq_ = 0;
};

}  // namespace mori::umbp::wire
