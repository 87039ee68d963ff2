// SPDX-License-Identifier: MIT
// Non-blocking TCP sockets with a deadline on every step, so a stalled or silent peer costs a
// thread at most its deadline, and shutdown(2) from another thread frees a waiting one.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace mori::umbp::wire {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

Deadline after_s(double seconds);

// The peer closed the connection, or broke the protocol: nothing more is to be read from it.
struct Closed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Timeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A socket call failed (connect refused, reset, ...), with its errno's text.
struct SocketError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(); }
  int get() const { return fd_; }
  void close();
  // Wakes a thread blocked on this socket; the descriptor stays open until close().
  void shutdown() const;

 private:
  int fd_ = -1;
};

// Listens on host (IPv6 when it holds a ':'), the port chosen by the kernel.
Fd listen_on(const std::string& host, uint16_t* port);
// Connects to host:port within the deadline (every address the name resolves to, in turn).
Fd connect_to(const std::string& host, uint16_t port, Deadline deadline);
// Non-blocking, TCP_NODELAY: what every wire socket is set to.
void make_wire_socket(int fd);

// Reads exactly what it is asked for, by the deadline as a whole, keeping what arrives beyond it
// for the next read: a frame usually comes in one recv(2).
class Reader {
 public:
  explicit Reader(int fd) : fd_(fd) {}
  void read(void* out, size_t n, Deadline deadline);

 private:
  int fd_;
  std::vector<uint8_t> buffer_ = std::vector<uint8_t>(64 << 10);
  size_t begin_ = 0;
  size_t end_ = 0;
};

// Writes every byte of the pieces by the deadline (one sendmsg(2) when the socket takes them).
void write_all(int fd, iovec* pieces, size_t count, Deadline deadline);

}  // namespace mori::umbp::wire
