// SPDX-License-Identifier: MIT
// A small RAII TCP layer for the bootstrap. Every blocking operation takes a Deadline so that a
// dead or silent peer turns into Error(TIMEOUT) or Error(PEER_LOST) instead of a hang; the
// messages name the peer and what was being waited for, because they end up in front of a user
// who has to find which host of the job went away.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace mori::shmem {

struct Deadline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point at;
  double seconds;  // the budget it was made from, quoted in timeout messages

  static Deadline after(double seconds);
  bool expired() const { return Clock::now() >= at; }
  // Milliseconds left, rounded up, clamped to [0, INT_MAX] for poll(2).
  int remaining_ms() const;
  Deadline earlier_of(const Deadline& other) const { return other.at < at ? other : *this; }
};

// "5", "0.25", "120" — how timeouts are quoted in messages.
std::string format_seconds(double seconds);

class Socket {
 public:
  Socket() = default;
  Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Who is at the other end, e.g. "rank 3 at 10.0.0.7:41002": used in every error message.
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }
  // Never blocks: the kernel finishes or resets the connection in the background.
  void close() noexcept;

  // Blocking with a deadline. `what` names the item, e.g. "the welcome of the rendezvous".
  void send_all(const void* data, size_t len, const Deadline& deadline, const std::string& what);
  void recv_all(void* data, size_t len, const Deadline& deadline, const std::string& what);
  // One non-blocking read of up to len bytes: returns bytes read (0 if none were ready) and
  // throws Error(PEER_LOST) on EOF or a reset. Lets the root multiplex many peers with poll(2).
  size_t recv_some(void* data, size_t len, const std::string& what);
  // Best effort, never blocks, never throws: for last words (ABORT) to a peer that may be gone.
  bool try_send(const void* data, size_t len) noexcept;
  // Sends FIN after what is queued: the peer reads our last frame, then EOF, instead of waiting.
  void shutdown_write() noexcept;

 private:
  int fd_ = -1;
  std::string peer_;
};

// A listening socket bound to ip:port (port 0 = a free one). reuse_addr lets rank 0 take over the
// port that create_unique_id probed, even with connections of an earlier job in TIME_WAIT.
// With bind_errno given, a failed bind returns an invalid Socket and the errno there, so the caller
// can explain EADDRINUSE / EADDRNOTAVAIL in its own terms; other failures throw Error(SYSTEM).
Socket listen_tcp(const std::string& ip, uint16_t port, bool reuse_addr, int backlog = 128,
                  int* bind_errno = nullptr);
uint16_t local_port(const Socket& socket);
// Accepts one connection, or returns an invalid Socket when the deadline passes first.
Socket accept_until(Socket& listener, const Deadline& deadline);
// Accepts one waiting connection without blocking. With none waiting: an invalid Socket and err 0.
// When the process or system is out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): an
// invalid Socket and err set, so that the caller can pause instead of giving up; else throws.
Socket try_accept(Socket& listener, int& err);
// Connects to ip:port, retrying every ~50 ms while the peer is not listening yet (it may start
// later than us), until the deadline; then throws Error(TIMEOUT) naming `peer_name`.
Socket connect_with_retry(const std::string& ip, uint16_t port, const Deadline& deadline,
                          const std::string& peer_name);

// The IPv4 address of interface ifname; "" means loopback (127.0.0.1) so that nothing is exposed
// on the network unless the user asked for it. Throws Error(CONFIG) listing the interfaces that
// do have an IPv4 address when ifname is unknown.
std::string interface_ipv4(const std::string& ifname);

}  // namespace mori::shmem
