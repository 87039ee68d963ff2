// SPDX-License-Identifier: MIT
// The TCP bootstrap: a star with rank 0 as the root. Ranks 1..n-1 connect to the root, answer a
// challenge with HMAC-SHA256(secret, nonce || rank || nranks), and then every collective is a
// request from each rank to the root followed by one reply from the root. The root checks that all
// ranks are in the same collective (kind, label, byte count, sequence number) before it mixes any
// data, and on any failure sends every rank the reason, so all PEs fail with the same message.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/handshake_gate.hpp"
#include "bootstrap/hmac_sha256.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id_registry.hpp"
#include "core/error.hpp"

namespace mori::shmem {

namespace {

constexpr uint32_t kHelloMagic = 0x4d4f5248;  // "MORH"
constexpr size_t kNonceBytes = kGateNonceBytes;
constexpr uint64_t kMaxPayload = uint64_t(1) << 30;
constexpr uint32_t kMaxLabel = 256;
// How long one connection may take to answer the challenge (NOTE [handshake gate]); a real rank
// answers within a round trip, so this only bounds what a silent client can hold.
constexpr double kHelloTimeoutS = 5;
// How much longer than MORI_BOOTSTRAP_TIMEOUT a joined rank waits for the root's verdict.
constexpr double kVerdictMarginS = 1;

enum Kind : uint32_t { kAllgather = 1, kBroadcast = 2, kBarrier = 3 };

struct Request {
  uint32_t kind;
  int32_t arg;
  uint64_t seq;
  uint64_t bytes;
  uint32_t label_len;
  uint32_t pad;
};

struct Reply {
  uint32_t status;
  uint32_t reason_len;
  uint64_t payload_len;
};

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t nranks;
  uint32_t pad;
  uint8_t mac[32];
};

Sha256Digest hello_mac(const Secret& secret, const uint8_t* nonce, int32_t rank, int32_t nranks) {
  uint8_t msg[kNonceBytes + 8];
  std::memcpy(msg, nonce, kNonceBytes);
  std::memcpy(msg + kNonceBytes, &rank, 4);
  std::memcpy(msg + kNonceBytes + 4, &nranks, 4);
  return hmac_sha256(secret.data(), secret.size(), msg, sizeof(msg));
}

const char* kind_name(uint32_t kind) {
  switch (kind) {
    case kAllgather: return "allgather";
    case kBroadcast: return "broadcast";
    case kBarrier: return "barrier";
  }
  return "unknown";
}

void send_reply(Socket& socket, uint32_t status, const std::string& reason, const void* data, uint64_t len,
                const Deadline& deadline) {
  Reply reply{status, static_cast<uint32_t>(reason.size()), len};
  socket.send_all(&reply, sizeof(reply), deadline, "a bootstrap reply");
  if (!reason.empty()) socket.send_all(reason.data(), reason.size(), deadline, "a bootstrap reply");
  if (len > 0) socket.send_all(data, len, deadline, "a bootstrap reply");
}

// Reads a reply; a non-success status becomes the Error it carries.
std::vector<uint8_t> recv_reply(Socket& socket, const Deadline& deadline, const std::string& what) {
  Reply reply{};
  socket.recv_all(&reply, sizeof(reply), deadline, what);
  if (reply.reason_len > 16384 || reply.payload_len > kMaxPayload) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap reply from ", socket.peer());
  }
  std::string reason(reply.reason_len, '\0');
  if (reply.reason_len > 0) socket.recv_all(reason.data(), reason.size(), deadline, what);
  std::vector<uint8_t> payload(reply.payload_len);
  if (reply.payload_len > 0) socket.recv_all(payload.data(), payload.size(), deadline, what);
  if (reply.status != MORI_SHMEM_SUCCESS) throw Error(static_cast<mori_shmem_status_t>(reply.status), reason);
  return payload;
}

class TcpBootstrap final : public Bootstrap {
 public:
  TcpBootstrap(const UniqueIdFields& fields, int rank, int nranks, double timeout_s)
      : rank_(rank), nranks_(nranks), timeout_s_(timeout_s), secret_(fields.secret) {
    if (nranks_ == 1) return;
    if (rank_ == 0) {
      accept_all(fields);
    } else {
      join(fields);
    }
  }

  ~TcpBootstrap() override = default;

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const Secret& secret() const override { return secret_; }

  void allgather(const void* send, void* recv, size_t bytes, const char* what) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (nranks_ == 1) {
      if (bytes > 0) std::memmove(recv, send, bytes);
      return;
    }
    std::vector<uint8_t> out = collective(kAllgather, 0, send, bytes, what);
    if (!out.empty()) std::memcpy(recv, out.data(), out.size());
  }

  void broadcast(void* buf, size_t bytes, int root, const char* what) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (nranks_ == 1) return;
    std::vector<uint8_t> out = collective(kBroadcast, root, buf, bytes, what);
    if (!out.empty()) std::memcpy(buf, out.data(), out.size());
  }

  void barrier(const char* what) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (nranks_ == 1) return;
    collective(kBarrier, 0, nullptr, 0, what);
  }

 private:
  void accept_all(const UniqueIdFields& fields) {
    int bind_errno = 0;
    listener_ = listen_tcp(fields.host, fields.port, /*reuse_addr=*/true, 128, &bind_errno);
    if (!listener_.valid()) {
      errno = bind_errno;
      throw_error(MORI_SHMEM_ERR_SYSTEM, "rendezvous: cannot listen on ", fields.host, ":", fields.port, ": ",
                  std::strerror(bind_errno),
                  unique_id_made_here(fields.port, fields.secret)
                      ? " (the port was taken since the unique id was made; make a new one)"
                      : "");
    }
    peers_.resize(nranks_);
    const Deadline deadline = Deadline::after(timeout_s_);
    // NOTE [handshake gate]: a connection that never says hello costs one slot for a few seconds,
    // not the whole rendezvous, and the real ranks go on joining meanwhile.
    GateLimits limits;
    limits.hello_timeout_s = std::min(kHelloTimeoutS, timeout_s_);
    HandshakeGate gate(listener_, sizeof(Hello), limits, "the bootstrap root (rank 0)");
    int joined = 1;
    while (joined < nranks_) {
      std::vector<Arrival> arrivals = gate.step(deadline);
      for (Arrival& arrival : arrivals) {
        if (admit(arrival, gate, deadline)) ++joined;
      }
      if (joined < nranks_ && deadline.expired()) {
        std::string missing;
        for (int r = 1; r < nranks_; ++r) {
          if (!peers_[r].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        std::string reason = "rendezvous: only " + std::to_string(joined) + " of " + std::to_string(nranks_) +
                             " PEs arrived within " + format_seconds(timeout_s_) + " s (MORI_BOOTSTRAP_TIMEOUT); " +
                             "missing ranks [" + missing + "]";
        if (gate.dropped() > 0) {
          reason += "; " + std::to_string(gate.dropped()) +
                    " other connection(s) to the root were dropped without joining (last: " + gate.last_drop() + ")";
        }
        abort_all(MORI_SHMEM_ERR_TIMEOUT, reason);
        throw Error(MORI_SHMEM_ERR_TIMEOUT, reason);
      }
    }
    for (int r = 1; r < nranks_; ++r) send_reply(peers_[r], MORI_SHMEM_SUCCESS, "", nullptr, 0, deadline);
    listener_.close();
  }

  // Checks a complete hello; a member is kept in peers_, anyone else gets the reason and is closed.
  bool admit(Arrival& arrival, HandshakeGate& gate, const Deadline& deadline) {
    Hello hello{};
    std::memcpy(&hello, arrival.hello.data(), sizeof(hello));
    Sha256Digest expected = hello_mac(secret_, arrival.nonce.data(), hello.rank, hello.nranks);
    auto reject = [&](mori_shmem_status_t status, const std::string& reason) {
      gate.refused(arrival.socket.peer(), reason);
      // Best effort and bounded: a client that stops reading must not hold up the rendezvous.
      try {
        send_reply(arrival.socket, status, reason, nullptr, 0, Deadline::after(0.1).earlier_of(deadline));
      } catch (const Error&) {
      }
      return false;
    };
    if (hello.magic != kHelloMagic || !constant_time_equal(expected.data(), hello.mac, expected.size())) {
      return reject(MORI_SHMEM_ERR_AUTH,
                    "rendezvous refused: the job secret does not match (the unique id is from another job)");
    }
    if (hello.nranks != nranks_) {
      return reject(MORI_SHMEM_ERR_INVALID_ARGUMENT, "rendezvous refused: nranks=" + std::to_string(hello.nranks) +
                                                         " but the root has nranks=" + std::to_string(nranks_));
    }
    if (hello.rank <= 0 || hello.rank >= nranks_) {
      return reject(MORI_SHMEM_ERR_PE_OUT_OF_RANGE, "rendezvous refused: rank=" + std::to_string(hello.rank) +
                                                        " is outside [1, " + std::to_string(nranks_) + ")");
    }
    if (peers_[hello.rank].valid()) {
      return reject(MORI_SHMEM_ERR_INVALID_ARGUMENT,
                    "rendezvous refused: rank " + std::to_string(hello.rank) + " has already joined");
    }
    arrival.socket.set_peer("rank " + std::to_string(hello.rank) + " at " + arrival.socket.peer());
    peers_[hello.rank] = std::move(arrival.socket);
    return true;
  }

  void join(const UniqueIdFields& fields) {
    const Deadline deadline = Deadline::after(timeout_s_);
    root_ = connect_with_retry(fields.host, fields.port, deadline, "the bootstrap root (rank 0)");
    root_.set_peer("the bootstrap root (rank 0) at " + fields.host + ":" + std::to_string(fields.port));
    uint8_t nonce[kNonceBytes];
    root_.recv_all(nonce, sizeof(nonce), deadline, "the rendezvous challenge");
    Hello hello{};
    hello.magic = kHelloMagic;
    hello.rank = rank_;
    hello.nranks = nranks_;
    Sha256Digest mac = hello_mac(secret_, nonce, rank_, nranks_);
    std::memcpy(hello.mac, mac.data(), mac.size());
    root_.send_all(&hello, sizeof(hello), deadline, "the hello");
    // The root gives its verdict at its own deadline, MORI_BOOTSTRAP_TIMEOUT after it began to
    // listen, which was before this connection; a rank that started earlier than the root must
    // not give up first, or it reports a bare timeout instead of the verdict that names the
    // missing ranks. So the wait runs the whole timeout again from here, plus a margin.
    recv_reply(root_, Deadline::after(timeout_s_ + kVerdictMarginS), "the welcome of the rendezvous");
  }

  void abort_all(mori_shmem_status_t status, const std::string& reason) {
    Reply reply{static_cast<uint32_t>(status), static_cast<uint32_t>(reason.size()), 0};
    for (int r = 1; r < nranks_; ++r) {
      if (!peers_[r].valid()) continue;
      std::vector<uint8_t> frame(sizeof(reply) + reason.size());
      std::memcpy(frame.data(), &reply, sizeof(reply));
      std::memcpy(frame.data() + sizeof(reply), reason.data(), reason.size());
      peers_[r].try_send(frame.data(), frame.size());
      peers_[r].shutdown_write();
    }
    failed_ = true;
  }

  std::vector<uint8_t> collective(uint32_t kind, int arg, const void* data, size_t bytes, const char* what) {
    if (failed_) throw_error(MORI_SHMEM_ERR_PEER_LOST, "the bootstrap failed earlier; finalize and start again");
    const Deadline deadline = Deadline::after(timeout_s_);
    const std::string label(what, std::min<size_t>(std::strlen(what), kMaxLabel));
    const uint64_t seq = ++seq_;
    if (rank_ != 0) {
      Request request{kind, arg, seq, bytes, static_cast<uint32_t>(label.size()), 0};
      root_.send_all(&request, sizeof(request), deadline, label);
      root_.send_all(label.data(), label.size(), deadline, label);
      const size_t send_len = (kind == kBroadcast && arg != rank_) ? 0 : bytes;
      if (send_len > 0) root_.send_all(data, send_len, deadline, label);
      return recv_reply(root_, deadline, std::string("the result of ") + label);
    }
    return relay(kind, arg, data, bytes, label, seq, deadline);
  }

  std::vector<uint8_t> relay(uint32_t kind, int arg, const void* data, size_t bytes, const std::string& label,
                             uint64_t seq, const Deadline& deadline) {
    std::vector<std::vector<uint8_t>> blocks(nranks_);
    blocks[0].assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + (data ? bytes : 0));
    try {
      for (int r = 1; r < nranks_; ++r) {
        Request request{};
        peers_[r].recv_all(&request, sizeof(request), deadline, label);
        if (request.label_len > kMaxLabel || request.bytes > kMaxPayload) {
          throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap request from rank ", r);
        }
        std::string their_label(request.label_len, '\0');
        if (request.label_len > 0) peers_[r].recv_all(their_label.data(), their_label.size(), deadline, label);
        const size_t len = (request.kind == kBroadcast && request.arg != r) ? 0 : request.bytes;
        blocks[r].resize(len);
        if (len > 0) peers_[r].recv_all(blocks[r].data(), len, deadline, label);
        if (request.kind != kind || their_label != label || request.bytes != bytes || request.seq != seq ||
            request.arg != arg) {
          throw_error(MORI_SHMEM_ERR_SYMMETRY, "collective mismatch: rank 0 called ", kind_name(kind), " '", label,
                      "' (", bytes, " bytes, #", seq, ") while rank ", r, " called ", kind_name(request.kind), " '",
                      their_label, "' (", request.bytes, " bytes, #", request.seq,
                      "); every PE must make the same collective calls in the same order");
        }
      }
    } catch (const Error& error) {
      abort_all(error.status(), error.what());
      throw;
    }
    std::vector<uint8_t> result;
    if (kind == kAllgather) {
      for (const auto& block : blocks) result.insert(result.end(), block.begin(), block.end());
    } else if (kind == kBroadcast) {
      result = blocks[arg];
    }
    for (int r = 1; r < nranks_; ++r) {
      try {
        send_reply(peers_[r], MORI_SHMEM_SUCCESS, "", result.data(), result.size(), deadline);
      } catch (const Error& error) {
        abort_all(error.status(), error.what());
        throw;
      }
    }
    return result;
  }

  int rank_;
  int nranks_;
  double timeout_s_;
  Secret secret_;
  std::mutex mutex_;
  uint64_t seq_ = 0;
  bool failed_ = false;
  Socket listener_;
  Socket root_;                // non-root ranks: the connection to rank 0
  std::vector<Socket> peers_;  // root: the connection to each rank
};

}  // namespace

std::unique_ptr<Bootstrap> connect_tcp_bootstrap(const mori_shmem_uniqueid_t& uid, int rank, int nranks,
                                                 double timeout_s) {
  UniqueIdFields fields = decode_unique_id(uid);
  return std::make_unique<TcpBootstrap>(fields, rank, nranks, timeout_s);
}

}  // namespace mori::shmem
