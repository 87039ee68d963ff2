// SPDX-License-Identifier: MIT
// Non-blocking TCP sockets driven by poll(2) with a deadline and a stop flag. Every blocking step
// of the engine goes through these helpers, so a dead or stalled peer turns into an Error within
// its deadline, and setting the stop flag (or shutdown(2) of the fd) frees a waiting thread.
#pragma once

#include <poll.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mori::io::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline never() { return Deadline::max(); }
inline Deadline after_ms(int64_t ms) { return ms <= 0 ? never() : Clock::now() + std::chrono::milliseconds(ms); }

// Owns one file descriptor.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket();

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  // Wakes any thread blocked on this socket; the fd stays open until the owner closes it.
  void shutdown_both() const;

 private:
  int fd_ = -1;
};

struct SocketOptions {
  int sndbuf = 0;  // 0 leaves the kernel's autotuning alone
  int rcvbuf = 0;
  bool nodelay = true;
  bool keepalive = true;
  int keepalive_idle_s = 30;
  int keepalive_intvl_s = 10;
  int keepalive_cnt = 3;
};

// Binds and listens; port 0 takes a free port, reported through bound_port.
Socket listen_tcp(const std::string& host, uint16_t port, int backlog, uint16_t* bound_port);
// Connects within timeout_ms; throws Error(Connection) naming host:port and the reason.
Socket connect_tcp(const std::string& host, uint16_t port, int64_t timeout_ms);
// Accepts one connection, or returns an invalid Socket when stop is set or the listener closes.
Socket accept_tcp(const Socket& listener, const std::atomic<bool>& stop, std::string* peer_address);

// Waits until the socket is ready for `events` (POLLIN, POLLOUT); throws Error(Timeout) past the
// deadline and Error(Connection) once stop is true. Errors and hang-ups surface from the next read
// or write.
void wait_ready(const Socket& socket, short events, Deadline deadline, const std::atomic<bool>* stop);

void apply_options(const Socket& socket, const SocketOptions& options);

// Move every byte of the iovecs (advanced in place) before the deadline. Throw Error(Connection)
// on EOF or a socket error, Error(Timeout) past the deadline or when stop becomes true.
void send_iov(const Socket& socket, iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop);
void recv_iov(const Socket& socket, iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop);
void send_all(const Socket& socket, const void* data, size_t len, Deadline deadline, const std::atomic<bool>* stop);
void recv_all(const Socket& socket, void* data, size_t len, Deadline deadline, const std::atomic<bool>* stop);

std::string local_hostname();

}  // namespace mori::io::net
