// SPDX-License-Identifier: MIT
#include "bootstrap/socket.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace mori::shmem {

namespace {

constexpr auto kConnectRetryInterval = std::chrono::milliseconds(50);

sockaddr_in make_address(const std::string& ip, uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "'", ip, "' is not a dotted IPv4 address");
  }
  return addr;
}

std::string endpoint(const std::string& ip, uint16_t port) { return ip + ":" + std::to_string(port); }

std::string peer_address(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "an unknown address";
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return endpoint(text, ntohs(addr.sin_port));
}

// Control messages are small and latency bound; Nagle would add 40 ms per round trip.
void set_nodelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

[[noreturn]] void throw_timeout(const Deadline& deadline, const std::string& what, const std::string& peer) {
  throw_error(MORI_SHMEM_ERR_TIMEOUT, "timed out after ", format_seconds(deadline.seconds), " s waiting for ", what,
              " (", peer, ")");
}

[[noreturn]] void throw_lost(const std::string& peer, const std::string& what, const char* how) {
  throw_error(MORI_SHMEM_ERR_PEER_LOST, "lost ", peer, " (", how, ") while waiting for ", what);
}

// Waits until fd is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return true;
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;
    }
    if (errno != EINTR) throw_system_error("poll");
  }
}

}  // namespace

Deadline Deadline::after(double seconds) {
  // Clamp so that "a very long time" does not overflow the clock arithmetic.
  const double clamped = std::min(std::max(seconds, 0.0), 1e9);
  const auto span = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(clamped));
  return Deadline{Clock::now() + span, seconds};
}

int Deadline::remaining_ms() const {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(at - Clock::now()).count();
  if (left <= 0) return 0;
  const long long ms = (left + 999) / 1000;
  return ms > INT_MAX ? INT_MAX : int(ms);
}

std::string format_seconds(double seconds) {
  std::ostringstream out;
  out << seconds;
  return out.str();
}

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), peer_(std::move(other.peer_)) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_ = std::move(other.peer_);
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Socket::send_all(const void* data, size_t len, const Deadline& deadline, const std::string& what) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t sent = 0;
  while (sent < len) {
    // MSG_NOSIGNAL: a peer that died must become an error here, not a SIGPIPE that kills us.
    const ssize_t n = ::send(fd_, bytes + sent, len - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd_, POLLOUT, deadline)) {
        throw_error(MORI_SHMEM_ERR_TIMEOUT, "timed out after ", format_seconds(deadline.seconds), " s sending ",
                    what, " to ", peer_, " (it stopped reading)");
      }
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      throw_error(MORI_SHMEM_ERR_PEER_LOST, "lost ", peer_, " (", std::strerror(errno),
                  ") while sending ", what);
    }
    throw_system_error("send to " + peer_);
  }
}

void Socket::recv_all(void* data, size_t len, const Deadline& deadline, const std::string& what) {
  auto* bytes = static_cast<uint8_t*>(data);
  size_t got = 0;
  while (got < len) {
    const size_t n = recv_some(bytes + got, len - got, what);
    got += n;
    if (got < len && n == 0 && !wait_ready(fd_, POLLIN, deadline)) throw_timeout(deadline, what, peer_);
  }
}

size_t Socket::recv_some(void* data, size_t len, const std::string& what) {
  for (;;) {
    const ssize_t n = ::recv(fd_, data, len, MSG_DONTWAIT);
    if (n > 0) return size_t(n);
    if (n == 0) {
      if (len == 0) return 0;
      throw_lost(peer_, what, "it closed the connection");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    if (errno == ECONNRESET || errno == EPIPE || errno == ETIMEDOUT) throw_lost(peer_, what, std::strerror(errno));
    throw_system_error("recv from " + peer_);
  }
}

bool Socket::try_send(const void* data, size_t len) noexcept {
  if (fd_ < 0) return false;
  const ssize_t n = ::send(fd_, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  return n == ssize_t(len);
}

void Socket::shutdown_write() noexcept {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

Socket listen_tcp(const std::string& ip, uint16_t port, bool reuse_addr, int backlog, int* bind_errno) {
  const sockaddr_in addr = make_address(ip, port);
  // CLOEXEC: a PE that execs a helper must not leak the rendezvous port into it.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw_system_error("socket");
  Socket sock(fd, "listener at " + endpoint(ip, port));
  if (reuse_addr) {
    const int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) throw_system_error("setsockopt(SO_REUSEADDR)");
  }
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (bind_errno != nullptr) {
      *bind_errno = errno;
      return Socket();
    }
    throw_system_error("bind to " + endpoint(ip, port));
  }
  if (::listen(fd, backlog) != 0) throw_system_error("listen on " + endpoint(ip, port));
  sock.set_peer("listener at " + endpoint(ip, local_port(sock)));
  return sock;
}

uint16_t local_port(const Socket& socket) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(socket.fd(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) throw_system_error("getsockname");
  return ntohs(addr.sin_port);
}

Socket accept_until(Socket& listener, const Deadline& deadline) {
  for (;;) {
    int err = 0;
    Socket socket = try_accept(listener, err);
    if (socket.valid()) return socket;
    if (err != 0) {
      // Out of descriptors and similar: retrying immediately would spin, so report it.
      errno = err;
      throw_system_error("accept on " + listener.peer());
    }
    if (!wait_ready(listener.fd(), POLLIN, deadline)) return Socket();
  }
}

Socket try_accept(Socket& listener, int& err) {
  err = 0;
  for (;;) {
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      set_nodelay(fd);
      return Socket(fd, peer_address(fd));
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      err = errno;
      return Socket();
    }
    throw_system_error("accept on " + listener.peer());
  }
}

Socket connect_with_retry(const std::string& ip, uint16_t port, const Deadline& deadline,
                          const std::string& peer_name) {
  const sockaddr_in addr = make_address(ip, port);
  std::string last_error = "no attempt finished";
  for (;;) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) throw_system_error("socket");
    Socket sock(fd, peer_name);
    int err = 0;
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) {
        if (wait_ready(fd, POLLOUT, deadline)) {
          socklen_t len = sizeof(err);
          if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    if (err == 0) {
      set_nodelay(fd);
      return sock;
    }
    last_error = std::strerror(err);
    // Refused / unreachable are what "rank 0 has not started yet" or "its host is still coming
    // up" look like, so they are retried; anything else is a configuration problem to report now.
    const bool transient = err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
                           err == ECONNRESET || err == EAGAIN || err == ECONNABORTED;
    if (!transient) {
      errno = err;
      throw_system_error("connect to " + peer_name);
    }
    sock.close();
    if (deadline.expired()) break;
    const auto pause = std::min<Deadline::Clock::duration>(kConnectRetryInterval, deadline.at - Deadline::Clock::now());
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
  }
  throw_error(MORI_SHMEM_ERR_TIMEOUT, "timed out after ", format_seconds(deadline.seconds), " s connecting to ",
              peer_name, " (last error: ", last_error, "); is rank 0 running and reachable from this host?");
}

std::string interface_ipv4(const std::string& ifname) {
  if (ifname.empty()) return "127.0.0.1";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw_system_error("getifaddrs");
  std::string found;
  std::vector<std::string> available;
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof(text));
    if (found.empty() && ifname == it->ifa_name) found = text;
    available.push_back(std::string(it->ifa_name) + " (" + text + ")");
  }
  freeifaddrs(list);
  if (!found.empty()) return found;
  std::string names;
  for (const auto& entry : available) names += (names.empty() ? "" : ", ") + entry;
  throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SOCKET_IFNAME=", ifname,
              ": no such interface with an IPv4 address; available: ", names.empty() ? "none" : names);
}

}  // namespace mori::shmem
