// SPDX-License-Identifier: MIT
// Shared pieces of the TCP bootstrap: its star topology has two roles, the root (rank 0, in
// bootstrap_root.cpp) and every other PE (bootstrap_client.cpp); tcp_bootstrap.cpp holds what both
// do the same way (argument checks, serialization, the failed-once-failed-forever rule).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/wire.hpp"

namespace mori::shmem {

// What one PE asked for in one collective; the root compares these across PEs.
struct CollectiveCall {
  wire::Kind kind = wire::Kind::Barrier;
  int32_t arg = 0;     // broadcast root
  uint64_t seq = 0;    // how many collectives this PE made before: catches a skipped one
  uint64_t bytes = 0;  // per-PE bytes (allgather) or buffer bytes (broadcast)
  std::string label;   // the caller's `what`
};

std::string describe(const CollectiveCall& call);
bool same_call(const CollectiveCall& a, const CollectiveCall& b);
// Bytes `rank` sends to the root, and bytes the root sends back to `rank`, for this call.
uint64_t contribution_bytes(const CollectiveCall& call, int rank);
uint64_t result_bytes(const CollectiveCall& call, int rank, int nranks);

// The caller's buffers of one collective; which are used depends on the kind.
struct CollectiveBuffers {
  const void* send = nullptr;  // allgather
  void* recv = nullptr;        // allgather: nranks * bytes
  void* buf = nullptr;         // broadcast
};

// "[1, 3-5, 9]": rank lists get long on big jobs.
std::string format_ranks(const std::vector<int>& ranks);

// The proof a PE sends: HMAC-SHA256(secret, nonce || rank || nranks), integers little-endian, so
// that a proof for one challenge or one (rank, nranks) cannot be replayed for another.
std::array<uint8_t, wire::kMacBytes> hello_mac(const Secret& secret, const uint8_t* nonce, int32_t rank,
                                               int32_t nranks);

// A wire status back to a status code; anything unknown becomes INTERNAL rather than trusted.
mori_shmem_status_t status_from_wire(uint32_t status);

// Non-roots wait this long past their own deadline for the root's reply, so that the root's
// ABORT, which names the missing ranks, reaches them before their own vaguer timeout fires.
double reply_grace_s(double timeout_s);

class TcpBootstrapBase : public Bootstrap {
 public:
  TcpBootstrapBase(int rank, int nranks, const Secret& secret, double timeout_s)
      : rank_(rank), nranks_(nranks), secret_(secret), timeout_s_(timeout_s) {}
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  const Secret& secret() const override { return secret_; }
  void allgather(const void* send, void* recv, size_t bytes_per_rank, const char* what) override;
  void broadcast(void* buf, size_t bytes, int root, const char* what) override;
  void barrier(const char* what) override;

 protected:
  // One collective over the network; throws Error on any failure of the job.
  virtual void exchange(const CollectiveCall& call, const CollectiveBuffers& io) = 0;

  const int rank_;
  const int nranks_;
  const Secret secret_;
  const double timeout_s_;

 private:
  void run(wire::Kind kind, int32_t arg, uint64_t bytes, const char* what, const CollectiveBuffers& io);

  std::mutex mutex_;  // one collective at a time per process: frames of two would interleave
  uint64_t next_seq_ = 0;
  bool failed_ = false;
  mori_shmem_status_t failed_status_ = MORI_SHMEM_SUCCESS;
  std::string failed_message_;
};

std::unique_ptr<Bootstrap> make_root_bootstrap(const UniqueIdFields& id, int nranks, double timeout_s);
std::unique_ptr<Bootstrap> make_client_bootstrap(const UniqueIdFields& id, int rank, int nranks, double timeout_s);

}  // namespace mori::shmem
