// SPDX-License-Identifier: MIT
#include "bootstrap/handshake_gate.hpp"

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "bootstrap/hmac_sha256.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::shmem {

namespace {

using Clock = Deadline::Clock;

// Out of descriptors or kernel memory: accepting again at once would spin on the same error.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);
// The first drops are warnings (someone should look); after that a flood would flood the log too.
constexpr uint64_t kLoggedDrops = 8;

Clock::duration seconds_to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(seconds, 0.0)));
}

int ms_until(Clock::time_point at) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now()).count();
  return left <= 0 ? 0 : int(std::min<long long>(left + 1, 60'000));
}

}  // namespace

HandshakeGate::HandshakeGate(Socket& listener, size_t hello_bytes, GateLimits limits, std::string owner)
    : listener_(listener), hello_bytes_(hello_bytes), limits_(limits), owner_(std::move(owner)) {
  limits_.max_pending = std::max<size_t>(limits_.max_pending, 1);
}

HandshakeGate::~HandshakeGate() = default;  // the pending sockets close with the deque

void HandshakeGate::drop(Pending& pending, const std::string& why) {
  refused(pending.socket.peer(), why);
  pending.socket.close();
}

void HandshakeGate::refused(const std::string& peer, const std::string& why) {
  ++dropped_;
  last_drop_ = peer + ": " + why;
  const log::Level level = dropped_ <= kLoggedDrops ? log::Level::Warning : log::Level::Debug;
  log::emit(level, owner_, " dropped a connection that did not complete the handshake (", last_drop_, ")",
            dropped_ == kLoggedDrops ? "; further drops are logged at DEBUG" : "");
}

bool HandshakeGate::make_room() {
  if (pending_.empty()) return true;
  Pending& oldest = pending_.front();
  if (Clock::now() - oldest.since < seconds_to_duration(limits_.evict_after_s)) return false;
  drop(oldest, "made way for a new connection after " + format_seconds(limits_.evict_after_s) +
                   " s without its hello, with " + std::to_string(limits_.max_pending) + " connections pending");
  pending_.pop_front();
  return true;
}

void HandshakeGate::accept_ready() {
  for (;;) {
    if (pending_.size() >= limits_.max_pending && !make_room()) return;
    int err = 0;
    Socket socket = try_accept(listener_, err);
    if (!socket.valid()) {
      if (err != 0) {
        accept_paused_until_ = Clock::now() + kAcceptPause;
        log::emit(log::Level::Warning, owner_, ": accept failed (", std::strerror(err), "); pausing for ",
                  kAcceptPause.count(), " ms");
      }
      return;
    }
    Pending pending{std::move(socket), {}, {}, Clock::now(), Deadline::after(limits_.hello_timeout_s)};
    random_bytes(pending.nonce.data(), pending.nonce.size());
    pending.got.reserve(hello_bytes_);
    // A fresh connection's send buffer is empty, so the nonce fits; if not, the peer is broken.
    if (!pending.socket.try_send(pending.nonce.data(), pending.nonce.size())) {
      drop(pending, "could not send it the nonce");
      continue;
    }
    pending_.push_back(std::move(pending));
  }
}

std::vector<Arrival> HandshakeGate::step(const Deadline& until, int wake_fd) {
  std::vector<Arrival> arrived;
  for (;;) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->deadline.expired()) {
        ++it;
        continue;
      }
      drop(*it, "sent " + std::to_string(it->got.size()) + " of " + std::to_string(hello_bytes_) +
                    " bytes of its hello within " + format_seconds(limits_.hello_timeout_s) + " s");
      it = pending_.erase(it);
    }

    const auto now = Clock::now();
    Clock::time_point wake_at = until.at;
    for (const Pending& p : pending_) wake_at = std::min(wake_at, p.deadline.at);
    const bool paused = now < accept_paused_until_;
    if (paused) wake_at = std::min(wake_at, accept_paused_until_);
    const bool full = pending_.size() >= limits_.max_pending;
    if (full) wake_at = std::min(wake_at, pending_.front().since + seconds_to_duration(limits_.evict_after_s));
    const bool can_evict = full && now - pending_.front().since >= seconds_to_duration(limits_.evict_after_s);
    const bool accepting = !paused && (!full || can_evict);

    std::vector<pollfd> fds;
    fds.reserve(pending_.size() + 2);
    const size_t wake_index = fds.size();
    if (wake_fd >= 0) fds.push_back({wake_fd, POLLIN, 0});
    const size_t listen_index = fds.size();
    if (accepting) fds.push_back({listener_.fd(), POLLIN, 0});
    const size_t first_pending = fds.size();
    for (const Pending& p : pending_) fds.push_back({p.socket.fd(), POLLIN, 0});

    const int rc = poll(fds.data(), fds.size(), ms_until(wake_at));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw_system_error("poll");
    }
    if (rc > 0) {
      // Backwards, so erasing one leaves the indices of those before it intact.
      for (size_t i = pending_.size(); i-- > 0;) {
        if (fds[first_pending + i].revents == 0) continue;
        Pending& p = pending_[i];
        const size_t have = p.got.size();
        p.got.resize(hello_bytes_);
        try {
          const size_t n = p.socket.recv_some(p.got.data() + have, hello_bytes_ - have, "its hello");
          p.got.resize(have + n);
        } catch (const Error& e) {
          drop(p, e.what());
          pending_.erase(pending_.begin() + std::ptrdiff_t(i));
          continue;
        }
        if (p.got.size() < hello_bytes_) continue;
        arrived.push_back(Arrival{std::move(p.socket), p.nonce, std::move(p.got)});
        pending_.erase(pending_.begin() + std::ptrdiff_t(i));
      }
      if (accepting && fds[listen_index].revents != 0) accept_ready();
      if (wake_fd >= 0 && fds[wake_index].revents != 0) return arrived;
    }
    if (!arrived.empty() || until.expired()) return arrived;
  }
}

}  // namespace mori::shmem
