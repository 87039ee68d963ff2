// SPDX-License-Identifier: MIT
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/hmac_sha256.hpp"
#include "bootstrap/tcp_bootstrap_internal.hpp"
#include "core/error.hpp"

namespace mori::shmem {

namespace {

void check_allgather(const void* send, void* recv, size_t bytes_per_rank, int nranks) {
  if (bytes_per_rank > wire::kMaxPayloadBytes / uint64_t(nranks)) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "bootstrap allgather of ", bytes_per_rank, " bytes per PE x ",
                nranks, " PEs exceeds the bootstrap limit of ", wire::kMaxPayloadBytes,
                " bytes (the bootstrap is a control plane; move bulk data through the heap)");
  }
  if (bytes_per_rank > 0 && (send == nullptr || recv == nullptr)) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "bootstrap allgather of ", bytes_per_rank,
                " bytes per PE got a NULL ", send == nullptr ? "send" : "recv", " buffer");
  }
}

void check_broadcast(void* buf, size_t bytes, int root, int nranks) {
  if (root < 0 || root >= nranks) {
    throw_error(MORI_SHMEM_ERR_PE_OUT_OF_RANGE, "bootstrap broadcast root ", root, " is not a PE of this job [0, ",
                nranks, ")");
  }
  if (bytes > wire::kMaxPayloadBytes) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "bootstrap broadcast of ", bytes,
                " bytes exceeds the bootstrap limit of ", wire::kMaxPayloadBytes, " bytes");
  }
  if (bytes > 0 && buf == nullptr) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "bootstrap broadcast of ", bytes, " bytes got a NULL buffer");
  }
}

// A job of one PE: collectives are local copies and no socket is ever opened.
class SingleBootstrap final : public Bootstrap {
 public:
  explicit SingleBootstrap(const Secret& secret) : secret_(secret) {}
  int rank() const override { return 0; }
  int nranks() const override { return 1; }
  const Secret& secret() const override { return secret_; }
  void allgather(const void* send, void* recv, size_t bytes_per_rank, const char*) override {
    check_allgather(send, recv, bytes_per_rank, 1);
    if (bytes_per_rank > 0) std::memmove(recv, send, bytes_per_rank);
  }
  void broadcast(void* buf, size_t bytes, int root, const char*) override { check_broadcast(buf, bytes, root, 1); }
  void barrier(const char*) override {}

 private:
  Secret secret_;
};

}  // namespace

std::string describe(const CollectiveCall& call) {
  std::ostringstream out;
  out << wire::kind_name(call.kind) << " '" << call.label << "'";
  if (call.kind == wire::Kind::Allgather) out << " of " << call.bytes << " B per PE";
  if (call.kind == wire::Kind::Broadcast) out << " of " << call.bytes << " B from PE " << call.arg;
  out << " (call #" << call.seq << ")";
  return out.str();
}

bool same_call(const CollectiveCall& a, const CollectiveCall& b) {
  return a.kind == b.kind && a.arg == b.arg && a.seq == b.seq && a.bytes == b.bytes && a.label == b.label;
}

uint64_t contribution_bytes(const CollectiveCall& call, int rank) {
  switch (call.kind) {
    case wire::Kind::Allgather: return call.bytes;
    case wire::Kind::Broadcast: return rank == call.arg ? call.bytes : 0;
    default: return 0;
  }
}

uint64_t result_bytes(const CollectiveCall& call, int rank, int nranks) {
  switch (call.kind) {
    case wire::Kind::Allgather: return call.bytes * uint64_t(nranks);
    case wire::Kind::Broadcast: return rank == call.arg ? 0 : call.bytes;  // the source has it already
    default: return 0;
  }
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out + "]";
}

std::array<uint8_t, wire::kMacBytes> hello_mac(const Secret& secret, const uint8_t* nonce, int32_t rank,
                                               int32_t nranks) {
  uint8_t message[wire::kNonceBytes + 8];
  std::memcpy(message, nonce, wire::kNonceBytes);
  wire::put_u32(message + wire::kNonceBytes, uint32_t(rank));
  wire::put_u32(message + wire::kNonceBytes + 4, uint32_t(nranks));
  return hmac_sha256(secret.data(), secret.size(), message, sizeof(message));
}

mori_shmem_status_t status_from_wire(uint32_t status) {
  if (status >= MORI_SHMEM_ERR_INVALID_ARGUMENT && status <= MORI_SHMEM_ERR_CONFIG) {
    return mori_shmem_status_t(status);
  }
  return MORI_SHMEM_ERR_INTERNAL;
}

double reply_grace_s(double timeout_s) { return std::min(2.0, 0.25 * timeout_s); }

void TcpBootstrapBase::allgather(const void* send, void* recv, size_t bytes_per_rank, const char* what) {
  check_allgather(send, recv, bytes_per_rank, nranks_);
  CollectiveBuffers io;
  io.send = send;
  io.recv = recv;
  run(wire::Kind::Allgather, 0, bytes_per_rank, what, io);
}

void TcpBootstrapBase::broadcast(void* buf, size_t bytes, int root, const char* what) {
  check_broadcast(buf, bytes, root, nranks_);
  CollectiveBuffers io;
  io.buf = buf;
  run(wire::Kind::Broadcast, root, bytes, what, io);
}

void TcpBootstrapBase::barrier(const char* what) { run(wire::Kind::Barrier, 0, 0, what, CollectiveBuffers{}); }

void TcpBootstrapBase::run(wire::Kind kind, int32_t arg, uint64_t bytes, const char* what,
                           const CollectiveBuffers& io) {
  std::lock_guard<std::mutex> lock(mutex_);
  // After a failure the PEs no longer agree on where the stream of frames stands; carrying on
  // would pair one PE's barrier with another's allgather, so the failure is permanent.
  if (failed_) {
    throw Error(failed_status_, "the bootstrap network failed earlier and cannot be used any more: " + failed_message_);
  }
  CollectiveCall call;
  call.kind = kind;
  call.arg = arg;
  call.seq = next_seq_++;
  call.bytes = bytes;
  call.label = what == nullptr ? "" : what;
  if (call.label.size() > wire::kMaxLabelBytes) call.label.resize(wire::kMaxLabelBytes);
  try {
    exchange(call, io);
  } catch (const Error& error) {
    failed_ = true;
    failed_status_ = error.status();
    failed_message_ = error.what();
    throw;
  }
}

std::unique_ptr<Bootstrap> connect_tcp_bootstrap(const mori_shmem_uniqueid_t& uid, int rank, int nranks,
                                                 double timeout_s) {
  if (nranks < 1) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "nranks must be at least 1, got ", nranks);
  if (rank < 0 || rank >= nranks) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "rank ", rank, " is out of range [0, ", nranks, ")");
  }
  if (!(timeout_s > 0) || !std::isfinite(timeout_s)) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "bootstrap timeout must be a positive number of seconds, got ",
                timeout_s);
  }
  const UniqueIdFields id = decode_unique_id(uid);
  if (nranks == 1) return std::make_unique<SingleBootstrap>(id.secret);
  if (rank == 0) return make_root_bootstrap(id, nranks, timeout_s);
  return make_client_bootstrap(id, rank, nranks, timeout_s);
}

}  // namespace mori::shmem
