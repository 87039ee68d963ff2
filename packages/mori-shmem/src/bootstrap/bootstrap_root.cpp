// SPDX-License-Identifier: MIT
// Rank 0: listens at the unique id's address, admits the PEs that prove they hold the secret, and
// relays every collective. It serves all PEs from one poll loop with incremental frame reads, so
// one slow, dead or hostile connection can neither stall the others nor go unnoticed.
#include <poll.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bootstrap/hmac_sha256.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/tcp_bootstrap_internal.hpp"
#include "bootstrap/unique_id_registry.hpp"
#include "bootstrap/wire.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::shmem {

namespace {

// An unauthenticated connection gets this long to answer the challenge; stragglers are dropped
// so that port scanners and impostors cannot pile up.
constexpr double kHandshakeSeconds = 10.0;
// Once one PE is seen in a different collective, the others get this long to show what they are
// in, so the SYMMETRY message can name every PE's call without waiting out the whole timeout.
constexpr double kMismatchGraceSeconds = 1.0;
constexpr size_t kMaxRejectionsReported = 8;
// Last words to a PE that is being turned away; it must not hold up the root.
constexpr double kRejectSendSeconds = 1.0;

struct PendingPeer {
  Socket socket;
  wire::FrameReader reader;
  uint8_t nonce[wire::kNonceBytes];
  Deadline handshake;
};

// "rank 3" or "ranks [0-2, 5]".
std::string rank_phrase(const std::vector<int>& ranks) {
  return ranks.size() == 1 ? "rank " + std::to_string(ranks[0]) : "ranks " + format_ranks(ranks);
}

// poll(2) that treats EINTR as "nothing ready yet".
void poll_until(std::vector<pollfd>& fds, const Deadline& deadline) {
  if (poll(fds.data(), nfds_t(fds.size()), deadline.remaining_ms()) < 0 && errno != EINTR) throw_system_error("poll");
}

class RootBootstrap final : public TcpBootstrapBase {
 public:
  RootBootstrap(const UniqueIdFields& id, int nranks, double timeout_s)
      : TcpBootstrapBase(0, nranks, id.secret, timeout_s),
        endpoint_(id.host + ":" + std::to_string(id.port)),
        peers_(size_t(nranks)) {
    rendezvous(id);
  }

 protected:
  void exchange(const CollectiveCall& call, const CollectiveBuffers& io) override;

 private:
  enum class Arrival { Waiting, Done, Mismatched };

  void rendezvous(const UniqueIdFields& id);
  Socket listen_at(const UniqueIdFields& id);
  // True when the PE proved itself and took its rank; otherwise it was told why and dropped.
  bool admit(PendingPeer& pending, std::vector<std::string>& rejections);
  void reject(PendingPeer& pending, mori_shmem_status_t status, const std::string& reason,
              const std::string& record, std::vector<std::string>& rejections);
  uint8_t* destination(const CollectiveCall& call, const CollectiveBuffers& io, int rank) const;
  [[noreturn]] void abort_symmetry(const CollectiveCall& mine, const std::vector<CollectiveCall>& seen,
                                   const std::vector<Arrival>& arrival);
  // Tells every connected PE (but `skip`, the one that is gone) why the job failed, then throws it.
  [[noreturn]] void abort_job(mori_shmem_status_t status, const std::string& reason, int skip = -1);

  std::string endpoint_;
  std::vector<Socket> peers_;  // by rank; [0] is this PE and stays empty
};

Socket RootBootstrap::listen_at(const UniqueIdFields& id) {
  int bind_errno = 0;
  Socket listener = listen_tcp(id.host, id.port, /*reuse_addr=*/true, /*backlog=*/128, &bind_errno);
  if (listener.valid()) return listener;
  // See NOTE [unique id port] in unique_id.cpp for why the port can be taken in between.
  if (bind_errno == EADDRINUSE) {
    throw_error(MORI_SHMEM_ERR_SYSTEM, "rank 0 cannot listen on ", endpoint_,
                ": the port was taken by another program since the unique id was made",
                unique_id_made_here(id.port, id.secret) ? " in this process" : "",
                "; make a new unique id (get_unique_id) and start the job again");
  }
  if (bind_errno == EADDRNOTAVAIL) {
    throw_error(MORI_SHMEM_ERR_SYSTEM, "rank 0 cannot listen on ", endpoint_,
                ": that address is not on this host; rank 0 must run on the host where the unique id was made "
                "(its MORI_SOCKET_IFNAME interface)");
  }
  throw_error(MORI_SHMEM_ERR_SYSTEM, "rank 0 cannot listen on ", endpoint_, ": ", std::strerror(bind_errno));
}

void RootBootstrap::rendezvous(const UniqueIdFields& id) {
  const Deadline deadline = Deadline::after(timeout_s_);
  Socket listener = listen_at(id);
  std::vector<PendingPeer> pending;
  std::vector<std::string> rejections;
  const size_t max_pending = size_t(nranks_) + 64;
  int joined = 1;

  while (joined < nranks_) {
    if (deadline.expired()) {
      std::vector<int> missing;
      for (int r = 1; r < nranks_; ++r) {
        if (!peers_[size_t(r)].valid()) missing.push_back(r);
      }
      std::string reason = "rendezvous: only " + std::to_string(joined) + " of " + std::to_string(nranks_) +
                           " PEs arrived within " + format_seconds(timeout_s_) + " s; missing ranks " +
                           format_ranks(missing);
      if (!rejections.empty()) {
        reason += "; rejected connections: ";
        for (size_t i = 0; i < rejections.size(); ++i) reason += (i > 0 ? "; " : "") + rejections[i];
      }
      abort_job(MORI_SHMEM_ERR_TIMEOUT, reason);
    }

    // Layout of fds: listener, then pending handshakes, then joined ranks (to notice them leave).
    std::vector<pollfd> fds;
    fds.push_back({listener.fd(), POLLIN, 0});
    Deadline wake = deadline;
    for (auto& p : pending) {
      fds.push_back({p.socket.fd(), POLLIN, 0});
      wake = wake.earlier_of(p.handshake);
    }
    std::vector<int> joined_ranks;
    for (int r = 1; r < nranks_; ++r) {
      if (!peers_[size_t(r)].valid()) continue;
      fds.push_back({peers_[size_t(r)].fd(), POLLIN, 0});
      joined_ranks.push_back(r);
    }
    poll_until(fds, wake);

    for (size_t i = 0; i < joined_ranks.size(); ++i) {
      if (fds[1 + pending.size() + i].revents == 0) continue;
      const int r = joined_ranks[i];
      uint8_t stray = 0;
      try {
        if (peers_[size_t(r)].recv_some(&stray, 1, "the end of the rendezvous") == 0) continue;
      } catch (const Error& error) {
        abort_job(MORI_SHMEM_ERR_PEER_LOST, "rendezvous: lost rank " + std::to_string(r) +
                                                " before every PE had joined: " + error.what(), r);
      }
      abort_job(MORI_SHMEM_ERR_INTERNAL,
                "rendezvous: " + peers_[size_t(r)].peer() + " sent data before the rendezvous completed", r);
    }

    for (size_t i = 0; i < pending.size(); ++i) {
      PendingPeer& p = pending[i];
      if (fds[1 + i].revents == 0) {
        if (p.handshake.expired()) p.socket.close();
        continue;
      }
      try {
        auto stage = p.reader.advance(p.socket, "the hello of the rendezvous");
        if (stage == wire::FrameReader::Stage::Described) {
          const wire::Header& h = p.reader.header();
          if (h.kind != wire::Kind::Hello || h.payload_len != wire::kMacBytes) {
            throw_error(MORI_SHMEM_ERR_INTERNAL, "expected a hello, got a ", wire::kind_name(h.kind), " frame");
          }
          p.reader.accept_payload(wire::kMacBytes, p.socket.peer());
          stage = p.reader.advance(p.socket, "the hello of the rendezvous");
        }
        if (stage == wire::FrameReader::Stage::Complete) {
          if (admit(p, rejections)) ++joined;
        }
      } catch (const Error& error) {
        // Not a PE of ours (a port scan, a different program): nothing to tell it.
        log::emit(log::Level::Debug, "bootstrap root: dropped connection from ", p.socket.peer(), ": ", error.what());
        p.socket.close();
      }
    }
    // admit() moved the admitted sockets out; the closed ones are dropped.
    std::vector<PendingPeer> still;
    for (auto& p : pending) {
      if (p.socket.valid()) still.push_back(std::move(p));
    }
    pending = std::move(still);

    if (fds[0].revents != 0) {
      for (;;) {
        Socket incoming = accept_until(listener, Deadline::after(0));
        if (!incoming.valid()) break;
        PendingPeer p;
        p.socket = std::move(incoming);
        p.handshake = Deadline::after(kHandshakeSeconds).earlier_of(deadline);
        random_bytes(p.nonce, sizeof(p.nonce));
        wire::Header challenge;
        challenge.kind = wire::Kind::Challenge;
        challenge.status = wire::kProtocolVersion;
        try {
          wire::send_frame(p.socket, challenge, "", p.nonce, sizeof(p.nonce), p.handshake, "the challenge");
        } catch (const Error&) {
          continue;  // gone already
        }
        if (pending.size() >= max_pending) pending.erase(pending.begin());  // oldest first: likely a stale one
        pending.push_back(std::move(p));
      }
    }
  }

  // Late or extra connections from now on are refused by the kernel instead of hanging.
  listener.close();
  wire::Header welcome;
  welcome.kind = wire::Kind::Welcome;
  for (int r = 1; r < nranks_; ++r) {
    try {
      wire::send_frame(peers_[size_t(r)], welcome, "", nullptr, 0, deadline, "the welcome");
    } catch (const Error& error) {
      abort_job(MORI_SHMEM_ERR_PEER_LOST, std::string("rendezvous: lost rank ") + std::to_string(r) +
                                              " before it was welcomed: " + error.what(), r);
    }
  }
}

bool RootBootstrap::admit(PendingPeer& p, std::vector<std::string>& rejections) {
  const wire::Header& h = p.reader.header();
  const std::string who = p.socket.peer() + (p.reader.label().empty() ? "" : " (" + p.reader.label() + ")");
  const std::string claim = who + " claiming rank " + std::to_string(h.arg);
  if (h.status != wire::kProtocolVersion) {
    reject(p, MORI_SHMEM_ERR_INVALID_ARGUMENT,
           "the bootstrap root (rank 0) at " + endpoint_ + " speaks bootstrap protocol version " +
               std::to_string(wire::kProtocolVersion) + " but this PE speaks " + std::to_string(h.status) +
               "; all PEs must run the same mori-shmem release",
           claim + ": protocol version " + std::to_string(h.status), rejections);
    return false;
  }
  // The MAC is checked before anything else the PE claims, so a PE without the secret learns
  // nothing about the job (its size, which ranks are in) from the rejection.
  const auto expected = hello_mac(secret_, p.nonce, h.arg, int32_t(uint32_t(h.bytes)));
  if (h.bytes > uint64_t(INT32_MAX) ||
      !constant_time_equal(expected.data(), p.reader.payload().data(), wire::kMacBytes)) {
    log::emit(log::Level::Warning, "bootstrap root at ", endpoint_, ": rejected ", claim,
              ": it does not hold the job secret");
    reject(p, MORI_SHMEM_ERR_AUTH,
           "the bootstrap root (rank 0) at " + endpoint_ + " rejected this PE (rank " + std::to_string(h.arg) +
               "): secret does not match: this PE's unique id carries a different job secret than rank 0's; every PE "
               "must use the unique id from the same get_unique_id call",
           claim + ": secret does not match", rejections);
    return false;
  }
  const int rank = h.arg;
  if (h.bytes != uint64_t(nranks_)) {
    reject(p, MORI_SHMEM_ERR_INVALID_ARGUMENT,
           "this PE (rank " + std::to_string(rank) + ") was started with nranks " + std::to_string(h.bytes) +
               " but rank 0 with nranks " + std::to_string(nranks_) + "; every PE must pass the same nranks",
           claim + ": nranks " + std::to_string(h.bytes) + " instead of " + std::to_string(nranks_), rejections);
    return false;
  }
  if (rank < 1 || rank >= nranks_) {
    reject(p, MORI_SHMEM_ERR_INVALID_ARGUMENT,
           "rank " + std::to_string(rank) + " is not a valid non-root rank of this job of " + std::to_string(nranks_) +
               " PEs (expected 1.." + std::to_string(nranks_ - 1) + "; rank 0 is the root)",
           claim + ": out of range", rejections);
    return false;
  }
  if (peers_[size_t(rank)].valid()) {
    reject(p, MORI_SHMEM_ERR_INVALID_ARGUMENT,
           "rank " + std::to_string(rank) + " has already joined from " + peers_[size_t(rank)].peer() +
               "; two PEs were given the same rank",
           claim + ": duplicate rank", rejections);
    return false;
  }
  p.socket.set_peer("rank " + std::to_string(rank) + " at " + who);
  peers_[size_t(rank)] = std::move(p.socket);
  return true;
}

void RootBootstrap::reject(PendingPeer& p, mori_shmem_status_t status, const std::string& reason,
                           const std::string& record, std::vector<std::string>& rejections) {
  if (rejections.size() < kMaxRejectionsReported) rejections.push_back(record);
  wire::Header header;
  header.kind = wire::Kind::Reject;
  header.status = uint32_t(status);
  try {
    wire::send_frame(p.socket, header, "", reason.data(), reason.size(), Deadline::after(kRejectSendSeconds),
                     "the rejection");
  } catch (const Error&) {
    // It is being turned away anyway.
  }
  p.socket.shutdown_write();
  p.socket.close();
}

uint8_t* RootBootstrap::destination(const CollectiveCall& call, const CollectiveBuffers& io, int rank) const {
  if (call.kind == wire::Kind::Allgather) return static_cast<uint8_t*>(io.recv) + uint64_t(rank) * call.bytes;
  if (call.kind == wire::Kind::Broadcast) return static_cast<uint8_t*>(io.buf);
  return nullptr;
}

void RootBootstrap::exchange(const CollectiveCall& call, const CollectiveBuffers& io) {
  const Deadline deadline = Deadline::after(timeout_s_);
  const std::string what = describe(call);
  if (call.kind == wire::Kind::Allgather && call.bytes > 0) std::memmove(io.recv, io.send, call.bytes);

  std::vector<Arrival> arrival(size_t(nranks_), Arrival::Waiting);
  arrival[0] = Arrival::Done;
  std::vector<CollectiveCall> seen(static_cast<size_t>(nranks_));
  seen[0] = call;
  std::vector<wire::FrameReader> readers(static_cast<size_t>(nranks_));
  std::optional<Deadline> mismatch_deadline;
  int outstanding = nranks_ - 1;

  while (outstanding > 0) {
    const Deadline wake = mismatch_deadline ? deadline.earlier_of(*mismatch_deadline) : deadline;
    if (wake.expired()) break;
    std::vector<pollfd> fds;
    std::vector<int> ranks;
    for (int r = 1; r < nranks_; ++r) {
      if (arrival[size_t(r)] != Arrival::Waiting) continue;
      fds.push_back({peers_[size_t(r)].fd(), POLLIN, 0});
      ranks.push_back(r);
    }
    poll_until(fds, wake);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const int r = ranks[i];
      Socket& peer = peers_[size_t(r)];
      wire::FrameReader& reader = readers[size_t(r)];
      try {
        auto stage = reader.advance(peer, "its contribution to " + what);
        if (stage == wire::FrameReader::Stage::Described) {
          const wire::Header& h = reader.header();
          if (h.kind != wire::Kind::Allgather && h.kind != wire::Kind::Broadcast && h.kind != wire::Kind::Barrier) {
            throw_error(MORI_SHMEM_ERR_INTERNAL, peer.peer(), " sent a ", wire::kind_name(h.kind),
                        " frame instead of a collective");
          }
          CollectiveCall theirs;
          theirs.kind = h.kind;
          theirs.arg = h.arg;
          theirs.seq = h.seq;
          theirs.bytes = h.bytes;
          theirs.label = reader.label();
          seen[size_t(r)] = theirs;
          const uint64_t expected = contribution_bytes(call, r);
          if (!same_call(theirs, call) || h.payload_len != expected) {
            arrival[size_t(r)] = Arrival::Mismatched;
            --outstanding;
            if (!mismatch_deadline) mismatch_deadline = Deadline::after(kMismatchGraceSeconds);
            continue;
          }
          reader.accept_payload(expected, peer.peer());
          stage = reader.advance(peer, "its contribution to " + what);
        }
        if (stage == wire::FrameReader::Stage::Complete) {
          const auto& payload = reader.payload();
          if (!payload.empty()) std::memcpy(destination(call, io, r), payload.data(), payload.size());
          arrival[size_t(r)] = Arrival::Done;
          --outstanding;
        }
      } catch (const Error& error) {
        // The socket's message already names the rank, its address and the collective.
        abort_job(error.status(), error.what(), r);
      }
    }
  }

  if (mismatch_deadline) abort_symmetry(call, seen, arrival);
  if (outstanding > 0) {
    std::vector<int> late, arrived;
    for (int r = 0; r < nranks_; ++r) (arrival[size_t(r)] == Arrival::Waiting ? late : arrived).push_back(r);
    abort_job(MORI_SHMEM_ERR_TIMEOUT, what + ": " + rank_phrase(late) + " did not arrive within " +
                                          format_seconds(timeout_s_) + " s (" + rank_phrase(arrived) + " did)");
  }

  wire::Header result;
  result.kind = wire::Kind::Result;
  result.seq = call.seq;
  const void* data = call.kind == wire::Kind::Allgather ? io.recv : io.buf;
  for (int r = 1; r < nranks_; ++r) {
    try {
      wire::send_frame(peers_[size_t(r)], result, "", data, result_bytes(call, r, nranks_), deadline,
                       "the result of " + what);
    } catch (const Error& error) {
      abort_job(error.status() == MORI_SHMEM_ERR_TIMEOUT ? MORI_SHMEM_ERR_TIMEOUT : MORI_SHMEM_ERR_PEER_LOST,
                error.what(), r);
    }
  }
}

void RootBootstrap::abort_symmetry(const CollectiveCall& mine, const std::vector<CollectiveCall>& seen,
                                   const std::vector<Arrival>& arrival) {
  // Group PEs by what they called: on a big job "ranks [0-6] called X; rank [7] called Y" is what
  // the user needs to find the diverging code path.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  std::vector<int> absent;
  for (int r = 0; r < nranks_; ++r) {
    if (arrival[size_t(r)] == Arrival::Waiting) {
      absent.push_back(r);
      continue;
    }
    const std::string text = describe(seen[size_t(r)]);
    auto it = groups.begin();
    while (it != groups.end() && it->first != text) ++it;
    if (it == groups.end()) {
      groups.push_back({text, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  std::string reason = "collectives do not match across PEs at call #" + std::to_string(mine.seq) + ": ";
  for (size_t i = 0; i < groups.size(); ++i) {
    reason += (i > 0 ? "; " : "") + rank_phrase(groups[i].second) + " called " + groups[i].first;
  }
  if (!absent.empty()) reason += "; " + rank_phrase(absent) + " had not entered a collective yet";
  reason += " (all PEs must make the same collective calls in the same order)";
  abort_job(MORI_SHMEM_ERR_SYMMETRY, reason);
}

void RootBootstrap::abort_job(mori_shmem_status_t status, const std::string& reason, int skip) {
  wire::Header header;
  header.kind = wire::Kind::Abort;
  header.status = uint32_t(status);
  const std::string text = reason.substr(0, wire::kMaxReasonBytes);
  const std::vector<uint8_t> frame = wire::encode_frame(header, "", text.data(), text.size());
  for (int r = 1; r < nranks_; ++r) {
    Socket& peer = peers_[size_t(r)];
    if (r == skip || !peer.valid()) continue;
    peer.try_send(frame.data(), frame.size());
    peer.shutdown_write();
  }
  throw Error(status, reason);
}

}  // namespace

std::unique_ptr<Bootstrap> make_root_bootstrap(const UniqueIdFields& id, int nranks, double timeout_s) {
  return std::make_unique<RootBootstrap>(id, nranks, timeout_s);
}

}  // namespace mori::shmem
