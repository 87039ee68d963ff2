// SPDX-License-Identifier: MIT
#include "cuda/fd_exchange.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace mori::shmem::cuda {

namespace {

// The kernel refuses more than SCM_MAX_FD (253) descriptors in one message.
constexpr size_t kFdsPerMessage = 200;

struct BatchHeader {
  int32_t rank;
  uint32_t first;  // index of this batch's first fd in the sender's list
  uint32_t count;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Abstract-namespace address: nothing on disk to clean up after a crash.
sockaddr_un address(const Secret& secret, int rank, unsigned exchange) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "mori-shmem-%02x%02x%02x%02x%02x%02x%02x%02x-%u-pe%d",
                secret[0], secret[1], secret[2], secret[3], secret[4], secret[5], secret[6], secret[7], exchange, rank);
  return addr;
}

socklen_t address_length(const sockaddr_un& addr) {
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(addr.sun_path + 1));
}

double seconds_left(std::chrono::steady_clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
}

// One message: the batch header as data, room for `fds` descriptors as SCM_RIGHTS ancillary data.
struct BatchMessage {
  BatchHeader header{};
  iovec iov{};
  std::vector<char> control;
  msghdr msg{};

  explicit BatchMessage(size_t fds) : control(CMSG_SPACE(sizeof(int) * fds)) {
    iov = {&header, sizeof(header)};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
  }
  // msg points into the object itself.
  BatchMessage(const BatchMessage&) = delete;
  BatchMessage& operator=(const BatchMessage&) = delete;
};

void send_batches(const sockaddr_un& to, int rank, const std::vector<int>& fds) {
  Fd sock(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) throw_system_error("socket(AF_UNIX)");
  if (connect(sock.get(), reinterpret_cast<const sockaddr*>(&to), address_length(to)) != 0) {
    throw_system_error("connecting to a peer's fd socket");
  }
  for (size_t first = 0; first < fds.size(); first += kFdsPerMessage) {
    const size_t count = std::min(kFdsPerMessage, fds.size() - first);
    BatchMessage message(count);
    message.header = {rank, static_cast<uint32_t>(first), static_cast<uint32_t>(count)};
    cmsghdr* cmsg = CMSG_FIRSTHDR(&message.msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * count);
    std::memcpy(CMSG_DATA(cmsg), fds.data() + first, sizeof(int) * count);
    if (sendmsg(sock.get(), &message.msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(BatchHeader))) {
      throw_system_error("sending file descriptors to a peer");
    }
  }
}

// Receives one peer's whole list on an accepted connection; returns the sender's rank.
int receive_batches(int sock, size_t expected, std::vector<std::vector<int>>& received, double timeout_s) {
  timeval tv{static_cast<time_t>(timeout_s), static_cast<suseconds_t>((timeout_s - static_cast<time_t>(timeout_s)) * 1e6)};
  setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int sender = -1;
  size_t got = 0;
  std::vector<int> list(expected, -1);
  while (got < expected) {
    BatchMessage message(kFdsPerMessage);
    const BatchHeader& header = message.header;
    const ssize_t n = recvmsg(sock, &message.msg, MSG_CMSG_CLOEXEC);
    if (n != static_cast<ssize_t>(sizeof(BatchHeader))) {
      for (int fd : list) {
        if (fd >= 0) close(fd);
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        throw_error(MORI_SHMEM_ERR_TIMEOUT, "vmm heap: a peer stopped sending its memory handles");
      }
      throw_error(MORI_SHMEM_ERR_PEER_LOST, "vmm heap: a peer closed the fd exchange early");
    }
    cmsghdr* cmsg = CMSG_FIRSTHDR(&message.msg);
    const size_t count = cmsg == nullptr ? 0 : (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    std::vector<int> batch(count);
    if (count > 0) std::memcpy(batch.data(), CMSG_DATA(cmsg), sizeof(int) * count);
    if (count != header.count || header.first + count > expected || (sender >= 0 && header.rank != sender)) {
      for (int fd : batch) close(fd);
      throw_error(MORI_SHMEM_ERR_INTERNAL, "vmm heap: malformed fd batch from rank ", header.rank);
    }
    sender = header.rank;
    std::copy(batch.begin(), batch.end(), list.begin() + header.first);
    got += count;
  }
  if (sender >= 0) received[sender] = std::move(list);
  return sender;
}

}  // namespace

std::vector<std::vector<int>> exchange_fds(Bootstrap& bootstrap, const std::vector<int>& fds, double timeout_s,
                                           const std::vector<uint8_t>& remote) {
  static std::atomic<unsigned> exchanges{0};
  const unsigned exchange = exchanges.fetch_add(1);
  const int rank = bootstrap.rank();
  const int nranks = bootstrap.nranks();
  std::vector<std::vector<int>> received(nranks);
  if (nranks == 1) return received;

  const uint64_t count = fds.size();
  std::vector<uint64_t> counts(nranks);
  bootstrap.allgather(&count, counts.data(), sizeof(count), "vmm heap: fd counts");
  for (int pe = 0; pe < nranks; ++pe) {
    if (counts[pe] != count) {
      throw_error(MORI_SHMEM_ERR_SYMMETRY, "vmm heap: PE ", pe, " shares ", counts[pe], " chunks, PE ", rank,
                  " shares ", count);
    }
  }
  const int32_t pid = getpid();
  std::vector<int32_t> pids(nranks);
  bootstrap.allgather(&pid, pids.data(), sizeof(pid), "vmm heap: pids");

  Fd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (listener.get() < 0) throw_system_error("socket(AF_UNIX)");
  const sockaddr_un own = address(bootstrap.secret(), rank, exchange);
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&own), address_length(own)) != 0 ||
      listen(listener.get(), nranks) != 0) {
    throw_system_error("listening for peers' memory handles");
  }
  bootstrap.barrier("vmm heap: fd sockets listening");
  const auto is_remote = [&](int pe) { return !remote.empty() && remote[pe] != 0; };
  int local_peers = 0;
  // A connect completes into the listener's backlog without an accept, so every PE can send to
  // all peers first and receive afterwards without deadlock.
  for (int step = 1; step < nranks; ++step) {
    const int peer = (rank + step) % nranks;
    if (is_remote(peer)) continue;
    send_batches(address(bootstrap.secret(), peer, exchange), rank, fds);
    ++local_peers;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_s));
  for (int accepted = 0; accepted < local_peers;) {
    pollfd pfd{listener.get(), POLLIN, 0};
    const int wait_ms = static_cast<int>(std::max(0.0, seconds_left(deadline)) * 1000);
    if (poll(&pfd, 1, wait_ms) <= 0) {
      throw_error(MORI_SHMEM_ERR_TIMEOUT, "vmm heap: only ", accepted, " of ", local_peers,
                  " peers sent their memory handles within ", timeout_s, " s");
    }
    Fd conn(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn.get() < 0) continue;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(conn.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        std::find(pids.begin(), pids.end(), cred.pid) == pids.end()) {
      continue;  // not a PE of this job: drop it without reading anything
    }
    const int sender = receive_batches(conn.get(), count, received, std::max(0.1, seconds_left(deadline)));
    if (sender < 0 || sender >= nranks || pids[sender] != cred.pid || is_remote(sender)) {
      throw_error(MORI_SHMEM_ERR_AUTH, "vmm heap: process ", cred.pid, " sent handles claiming to be rank ", sender);
    }
    ++accepted;
  }
  return received;
}

}  // namespace mori::shmem::cuda
