// SPDX-License-Identifier: MIT
#include "wire/socket_io.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace mori::umbp::wire {

namespace {

[[noreturn]] void fail(const std::string& what, int error) {
  throw SocketError(what + ": " + std::strerror(error));
}

// Waits for `events` on fd until the deadline: false once it is past.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return false;
    pollfd p{fd, events, 0};
    // Round up, so a deadline 0.4 ms away is waited for, not spun on.
    const int rc = ::poll(&p, 1, int(std::min<int64_t>(left + 1, 60'000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) fail("poll", errno);
  }
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list != nullptr) freeaddrinfo(list);
  }
};

AddrInfo resolve(const std::string& host, uint16_t port, int family, int flags) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  AddrInfo found;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found.list);
  if (rc != 0) throw SocketError("resolving " + host + ": " + gai_strerror(rc));
  return found;
}

}  // namespace

Deadline after_s(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Fd::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Fd::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

void make_wire_socket(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

Fd listen_on(const std::string& host, uint16_t* port) {
  const int family = host.find(':') != std::string::npos ? AF_INET6 : AF_INET;
  const AddrInfo found = resolve(host, 0, family, AI_PASSIVE);
  int error = 0;
  for (addrinfo* a = found.list; a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      error = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      error = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return fd;
  }
  fail("listening on " + host, error);
}

Fd connect_to(const std::string& host, uint16_t port, Deadline deadline) {
  const AddrInfo found = resolve(host, port, AF_UNSPEC, 0);
  std::string why = "no address";
  for (addrinfo* a = found.list; a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (fd.get() < 0) {
      why = std::strerror(errno);
      continue;
    }
    make_wire_socket(fd.get());
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) return fd;
    if (errno != EINPROGRESS) {
      why = std::strerror(errno);
      continue;
    }
    if (!wait_for(fd.get(), POLLOUT, deadline)) throw Timeout("timed out");
    int error = 0;
    socklen_t len = sizeof(error);
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
    if (error == 0) return fd;
    why = std::strerror(error);
  }
  throw SocketError("connecting to " + host + ":" + std::to_string(port) + ": " + why);
}

void Reader::read(void* out, size_t n, Deadline deadline) {
  auto* dst = static_cast<uint8_t*>(out);
  while (n > 0) {
    if (begin_ < end_) {
      const size_t take = std::min(n, end_ - begin_);
      std::memcpy(dst, buffer_.data() + begin_, take);
      begin_ += take;
      dst += take;
      n -= take;
      continue;
    }
    begin_ = end_ = 0;
    // A large remainder goes straight to its destination; a small one fills the buffer.
    const bool direct = n >= buffer_.size();
    const ssize_t got = ::recv(fd_, direct ? dst : buffer_.data(), direct ? n : buffer_.size(), 0);
    if (got > 0) {
      if (direct) {
        dst += got;
        n -= size_t(got);
      } else {
        end_ = size_t(got);
      }
      continue;
    }
    if (got == 0) throw Closed("the connection closed");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) fail("recv", errno);
    if (!wait_for(fd_, POLLIN, deadline)) throw Timeout("timed out");
  }
}

void write_all(int fd, iovec* pieces, size_t count, Deadline deadline) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = pieces;
    msg.msg_iovlen = count;
    const ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) fail("send", errno);
      if (!wait_for(fd, POLLOUT, deadline)) throw Timeout("timed out");
      continue;
    }
    size_t left = size_t(sent);
    while (count > 0 && left >= pieces->iov_len) {
      left -= pieces->iov_len;
      ++pieces;
      --count;
    }
    if (count > 0) {
      pieces->iov_base = static_cast<uint8_t*>(pieces->iov_base) + left;
      pieces->iov_len -= left;
    }
  }
}

}  // namespace mori::umbp::wire
