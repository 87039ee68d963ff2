// SPDX-License-Identifier: MIT
#include "net/socket.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "core/error.hpp"

namespace mori::io::net {

namespace {

// Poll granularity: how quickly a waiting thread notices its stop flag without a shutdown(2).
constexpr int kPollSliceMs = 100;

std::string errno_text(int err) { return std::strerror(err); }

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw Error(Code::System, "fcntl(O_NONBLOCK) failed: " + errno_text(errno));
  }
}

sockaddr_in resolve_ipv4(const std::string& host, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  const std::string name = host.empty() ? "127.0.0.1" : host;
  if (inet_pton(AF_INET, name.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw Error(Code::InvalidArgument, "cannot resolve host '" + name + "': " + gai_strerror(rc));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

// Drops `done` bytes from the front of an iovec array; returns the new start index.
size_t advance(iovec* iov, size_t count, size_t start, size_t done) {
  while (start < count && done > 0) {
    size_t take = std::min(done, iov[start].iov_len);
    iov[start].iov_base = static_cast<char*>(iov[start].iov_base) + take;
    iov[start].iov_len -= take;
    done -= take;
    if (iov[start].iov_len == 0) ++start;
  }
  while (start < count && iov[start].iov_len == 0) ++start;
  return start;
}

}  // namespace

void wait_ready(const Socket& socket, short events, Deadline deadline, const std::atomic<bool>* stop) {
  for (;;) {
    if (stop != nullptr && stop->load(std::memory_order_relaxed)) {
      throw Error(Code::Connection, "connection closed locally");
    }
    int slice = kPollSliceMs;
    if (deadline != never()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw Error(Code::Timeout, "timed out waiting for the peer");
      slice = int(std::min<int64_t>(left, kPollSliceMs));
    }
    pollfd p{socket.fd(), events, 0};
    int rc = poll(&p, 1, slice);
    if (rc > 0) return;  // errors and hang-ups surface from the following read or write
    if (rc < 0 && errno != EINTR) throw Error(Code::System, "poll failed: " + errno_text(errno));
  }
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::shutdown_both() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Socket listen_tcp(const std::string& host, uint16_t port, int backlog, uint16_t* bound_port) {
  sockaddr_in addr = resolve_ipv4(host, port);
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) throw Error(Code::System, "socket() failed: " + errno_text(errno));
  int one = 1;
  setsockopt(sock.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw Error(Code::Connection, "cannot bind " + host + ":" + std::to_string(port) + ": " + errno_text(errno));
  }
  if (::listen(sock.fd(), backlog) != 0) throw Error(Code::System, "listen() failed: " + errno_text(errno));
  socklen_t len = sizeof(addr);
  getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&addr), &len);
  *bound_port = ntohs(addr.sin_port);
  set_nonblocking(sock.fd());
  return sock;
}

Socket connect_tcp(const std::string& host, uint16_t port, int64_t timeout_ms) {
  const std::string where = host + ":" + std::to_string(port);
  sockaddr_in addr = resolve_ipv4(host, port);
  Socket sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) throw Error(Code::System, "socket() failed: " + errno_text(errno));
  set_nonblocking(sock.fd());
  if (::connect(sock.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EINPROGRESS) throw Error(Code::Connection, "cannot connect to " + where + ": " + errno_text(errno));
    try {
      wait_ready(sock, POLLOUT, after_ms(timeout_ms), nullptr);
    } catch (const Error&) {
      throw Error(Code::Connection,
                  "cannot connect to " + where + ": no answer within " + std::to_string(timeout_ms) + " ms");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) throw Error(Code::Connection, "cannot connect to " + where + ": " + errno_text(err));
  }
  return sock;
}

Socket accept_tcp(const Socket& listener, const std::atomic<bool>& stop, std::string* peer_address) {
  while (!stop.load()) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
      *peer_address = std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
      return Socket(fd);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      pollfd p{listener.fd(), POLLIN, 0};
      poll(&p, 1, kPollSliceMs);
      continue;
    }
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      poll(nullptr, 0, kPollSliceMs);  // out of descriptors: back off instead of spinning
      continue;
    }
    return Socket();  // the listener was shut down
  }
  return Socket();
}

void apply_options(const Socket& socket, const SocketOptions& o) {
  int fd = socket.fd();
  int one = 1;
  if (o.nodelay) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (o.sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &o.sndbuf, sizeof(o.sndbuf));
  if (o.rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &o.rcvbuf, sizeof(o.rcvbuf));
  if (o.keepalive) {
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &o.keepalive_idle_s, sizeof(int));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &o.keepalive_intvl_s, sizeof(int));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &o.keepalive_cnt, sizeof(int));
  }
}

namespace {

// send_iov and recv_iov are one loop: the direction picks the call, the readiness to wait for, and
// what a zero-byte return means (a receive: the peer closed; a send: it is gone, reported as EPIPE).
void move_iov(const Socket& socket, iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop,
              bool sending) {
  size_t start = advance(iov, count, 0, 0);
  while (start < count) {
    msghdr msg{};
    msg.msg_iov = iov + start;
    msg.msg_iovlen = std::min<size_t>(count - start, IOV_MAX);
    ssize_t moved = sending ? ::sendmsg(socket.fd(), &msg, MSG_NOSIGNAL) : ::recvmsg(socket.fd(), &msg, 0);
    if (moved > 0) {
      start = advance(iov, count, start, size_t(moved));
      continue;
    }
    if (moved == 0 && !sending) throw Error(Code::Connection, "the peer closed the connection");
    if (moved < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(socket, sending ? POLLOUT : POLLIN, deadline, stop);
      continue;
    }
    if (moved < 0 && errno == EINTR) continue;
    throw Error(Code::Connection,
                std::string(sending ? "send" : "receive") + " failed: " + errno_text(moved < 0 ? errno : EPIPE));
  }
}

}  // namespace

void send_iov(const Socket& socket, iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop) {
  move_iov(socket, iov, count, deadline, stop, /*sending=*/true);
}

void recv_iov(const Socket& socket, iovec* iov, size_t count, Deadline deadline, const std::atomic<bool>* stop) {
  move_iov(socket, iov, count, deadline, stop, /*sending=*/false);
}

void send_all(const Socket& socket, const void* data, size_t len, Deadline deadline, const std::atomic<bool>* stop) {
  iovec iov{const_cast<void*>(data), len};
  send_iov(socket, &iov, 1, deadline, stop);
}

void recv_all(const Socket& socket, void* data, size_t len, Deadline deadline, const std::atomic<bool>* stop) {
  iovec iov{data, len};
  recv_iov(socket, &iov, 1, deadline, stop);
}

std::string local_hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace mori::io::net
