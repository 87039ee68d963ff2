// SPDX-License-Identifier: MIT
// NOTE [bootstrap]
// The bootstrap network is the host-side control plane that every PE joins at init: it carries
// the rendezvous (who is in the job), the exchange of heap names/addresses, and host barriers.
// It is not a data path. Every call here is COLLECTIVE: all PEs call it in the same order, with
// the same `what` label and the same byte count; the implementation detects a mismatch (a PE in
// barrier while another is in malloc) and fails all PEs with MORI_SHMEM_ERR_SYMMETRY instead of
// mixing up their data. Every call has a deadline; a PE that dies or stops answering makes the
// others fail with MORI_SHMEM_ERR_PEER_LOST or MORI_SHMEM_ERR_TIMEOUT, never hang.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mori_shmem/mori_shmem.h"

namespace mori::shmem {

constexpr size_t kSecretBytes = 32;
using Secret = std::array<uint8_t, kSecretBytes>;

// The decoded contents of a mori_shmem_uniqueid_t.
struct UniqueIdFields {
  uint32_t protocol_version = 0;
  std::string host;  // dotted IPv4 of the rendezvous root
  uint16_t port = 0;
  Secret secret{};
};

// Encodes / decodes the 128-byte unique id. decode throws Error(INVALID_ARGUMENT) on a bad magic,
// an unknown protocol version or a malformed address.
void encode_unique_id(const UniqueIdFields& fields, mori_shmem_uniqueid_t* out);
UniqueIdFields decode_unique_id(const mori_shmem_uniqueid_t& uid);

// Picks the interface (MORI_SOCKET_IFNAME, loopback by default) and a free port there (probed,
// not held: Linux refuses a second listener on a bound port); rank 0 binds it when it joins.
void create_unique_id(mori_shmem_uniqueid_t* out);

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // recv receives nranks * bytes_per_rank bytes, rank r's block at offset r * bytes_per_rank.
  virtual void allgather(const void* send, void* recv, size_t bytes_per_rank, const char* what) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root, const char* what) = 0;
  virtual void barrier(const char* what) = 0;
  // The job secret from the unique id: used to name per-job resources (shared memory segments).
  virtual const Secret& secret() const = 0;
};

// Joins the job described by uid as `rank` of `nranks`. timeout_s bounds the rendezvous and
// every later collective. Rank 0 is the root: it accepts the other ranks, checks that each one
// proves knowledge of the secret (HMAC-SHA256 over a fresh challenge), and relays collectives.
std::unique_ptr<Bootstrap> connect_tcp_bootstrap(const mori_shmem_uniqueid_t& uid, int rank, int nranks,
                                                 double timeout_s);

}  // namespace mori::shmem
