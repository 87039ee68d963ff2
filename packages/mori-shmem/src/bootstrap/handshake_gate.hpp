// SPDX-License-Identifier: MIT
// NOTE [handshake gate]
// The front door of every listener of mori-shmem (the bootstrap root, the TCP conduit's server).
// Anyone who can reach the port can connect, so until a connection has proved the job secret it
// costs this process as little as possible and can hold up nobody:
//   - one thread multiplexes every unauthenticated connection with poll(2); no thread, stack or
//     buffer beyond the fixed-size hello is spent on a connection before it authenticates;
//   - each connection gets its nonce at once and has `hello_timeout_s` to send its whole hello,
//     independent of other connections and of the caller's overall deadline; a silent or slow one
//     is closed when its own deadline passes, and the others go on meanwhile;
//   - at most `max_pending` connections are in the handshake at once. When all slots are taken,
//     the oldest connection that has been pending for `evict_after_s` gives way to a new one (a
//     real peer answers its nonce within a round trip, so only silent ones are ever that old);
//     when none is that old, new connections wait in the kernel's backlog;
//   - running out of descriptors (EMFILE, ENFILE, ...) pauses accepting briefly instead of
//     stopping it, so the listener recovers when the flood goes away.
// The gate only collects hellos; checking them (the MAC, the rank) is the owner's job.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"

namespace mori::shmem {

constexpr size_t kGateNonceBytes = 32;

struct GateLimits {
  size_t max_pending = 64;
  double hello_timeout_s = 10;
  double evict_after_s = 1;
};

// A connection whose hello arrived in full: the nonce it was sent and the hello bytes it answered.
struct Arrival {
  Socket socket;
  std::array<uint8_t, kGateNonceBytes> nonce{};
  std::vector<uint8_t> hello;
};

class HandshakeGate {
 public:
  // listener must stay open while the gate is used. owner names the listener in log lines, e.g.
  // "the bootstrap root" or "PE 3's remote transport".
  HandshakeGate(Socket& listener, size_t hello_bytes, GateLimits limits, std::string owner);
  ~HandshakeGate();
  HandshakeGate(const HandshakeGate&) = delete;
  HandshakeGate& operator=(const HandshakeGate&) = delete;

  // Accepts, sends nonces and reads hellos until at least one hello is complete, `until` passes,
  // or wake_fd (if >= 0) becomes readable; returns the complete ones (maybe none).
  std::vector<Arrival> step(const Deadline& until, int wake_fd = -1);

  // Records that the owner refused a complete hello (bad MAC, wrong rank): counted and logged
  // like the gate's own drops.
  void refused(const std::string& peer, const std::string& why);

  size_t pending() const { return pending_.size(); }
  uint64_t dropped() const { return dropped_; }
  // "127.0.0.1:51234: sent 0 of 48 bytes of its hello within 10 s", "" before any drop.
  const std::string& last_drop() const { return last_drop_; }

 private:
  struct Pending {
    Socket socket;
    std::array<uint8_t, kGateNonceBytes> nonce{};
    std::vector<uint8_t> got;
    Deadline::Clock::time_point since;
    Deadline deadline;
  };

  void accept_ready();
  bool make_room();
  void drop(Pending& pending, const std::string& why);

  Socket& listener_;
  size_t hello_bytes_;
  GateLimits limits_;
  std::string owner_;
  std::deque<Pending> pending_;  // oldest first
  Deadline::Clock::time_point accept_paused_until_{};
  uint64_t dropped_ = 0;
  std::string last_drop_;
};

}  // namespace mori::shmem
