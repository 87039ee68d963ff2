// SPDX-License-Identifier: MIT
// NOTE [remote transport]
// How a PE reaches the heap of a PE it cannot load/store (another host, or P2P disabled): through
// a conduit, one per PE, built at init when some pair of PEs of the job is remote. Two exist:
//   - TcpConduit (tcp_conduit.hpp): mori's own, over TCP to a server thread in the target's process.
//     Always available; authenticates every connection with the job secret.
//   - UcxConduit (ucx_conduit.hpp): UCX's UCP, opened with dlopen (the libucx wheel's, else the
//     system's): RDMA verbs where that UCX has them, else its tcp and shared-memory transports.
// MORI_SHMEM_REMOTE_CONDUIT picks one (make_conduit below); every PE of a job uses the same one.
//
// What every conduit guarantees (host_rma.cpp, gpu_remote_io.cpp and the device proxy rely on it):
//   - put returns once src may be reused; the bytes are in the target's heap after quiet.
//   - get returns with the bytes in dest.
//   - put_signal: a PE that observes the signal word change also observes the data.
//   - signal and non-fetching atomics are applied at the latest by the next quiet; atomic returns
//     the old value of fetching ones. Atomics are atomic with respect to each other and to the CPU
//     atomics that the target's node-mates apply to the same word through load/store (all but the
//     opt-in MORI_SHMEM_UCX_ATOMICS=ucx, which uses NIC atomics: NOTE [ucx conduit]).
//   - quiet: every put, signal and atomic issued before it (by any thread of this PE) is applied.
//   - Every blocking step has a deadline (MORI_SHMEM_WAIT_TIMEOUT); a dead or stuck peer gives
//     PEER_LOST or TIMEOUT naming it, never a hang, and later calls towards it fail at once.
// Offsets are heap offsets of the target PE (heaps are symmetric: every PE's has the same size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "remote/heap_access.hpp"

namespace mori::shmem::remote {

struct ConduitConfig {
  std::string choice = "auto";    // MORI_SHMEM_REMOTE_CONDUIT: auto, ucx or tcp
  double timeout_s = 300;         // deadline of each blocking step
  std::string ifname;             // "" = loopback
  int streams = 2;                // tcp: connections per remote PE
  // tcp: transfers above this are split over the streams; from 1 MiB up a stripe per stream beat
  // one stream in A/B runs (docs/benchmarks/shmem.md), at 512 KiB a second stripe did not pay.
  size_t stripe_bytes = 512 << 10;
  int serve_spin_us = 0;  // tcp: how long a serving thread polls for the next request before it sleeps
  std::string ucx_dir;            // where libucp.so.0 is; "" = the system's
  std::string ucx_atomics = "auto";  // MORI_SHMEM_UCX_ATOMICS: auto, ucx or am
  std::string rdma_devices;       // MORI_RDMA_DEVICES: the RDMA devices the ucx conduit may use ("" = all)
};

// This PE's heap as the conduit serves it.
struct LocalHeap {
  HeapAccess& access;  // applies what arrives (kept, not owned)
  uint8_t* base;       // this process's address of the heap
  bool gpu;            // GPU memory (the cuda backend): host code cannot touch it
};

// NOTE [streamed staging]: a payload still being copied into src while it is sent. staged(begin,
// length) returns once src[begin] holds its byte and says how many of the `length` bytes from begin
// do (at least 1); it may be called from several threads at once. The tcp conduit's side is
// checked without a GPU by tests/test_conduit_staged.py.
using Staged = std::function<size_t(size_t begin, size_t length)>;

class Conduit {
 public:
  virtual ~Conduit() = default;
  virtual void put(int pe, uint64_t offset, const void* src, size_t nbytes) = 0;
  virtual void get(int pe, uint64_t offset, void* dest, size_t nbytes) = 0;
  virtual void put_signal(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset,
                          uint64_t signal, int sig_op) = 0;
  // put and put_signal of a payload that `staged` says is in place piece by piece (NOTE [streamed
  // staging]). A conduit that sends a payload only whole waits for all of it first.
  virtual void put_staged(int pe, uint64_t offset, const void* src, size_t nbytes, const Staged& staged) {
    wait_staged(staged, nbytes);
    put(pe, offset, src, nbytes);
  }
  virtual void put_signal_staged(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset,
                                 uint64_t signal, int sig_op, const Staged& staged) {
    wait_staged(staged, nbytes);
    put_signal(pe, offset, src, nbytes, signal_offset, signal, sig_op);
  }
  virtual void signal(int pe, uint64_t signal_offset, uint64_t signal, int sig_op) = 0;
  // The bytes each connection carries of an nbytes put to pe (nbytes when one carries it all):
  // staging copies the start of every stripe first (NOTE [stripe-first staging]).
  virtual size_t stripe_bytes(int pe, size_t nbytes) const {
    (void)pe;
    return nbytes;
  }
  // amo: MORI_SHMEM_AMO_* / SIGNAL_*; type: MORI_SHMEM_TYPE_*; returns the old value (0 when the
  // operation does not fetch), sign-extended for INT32.
  virtual uint64_t atomic(int pe, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) = 0;
  virtual void quiet() = 0;
  // How this PE is reached, for diagnostics and tests: "ip:port" (tcp) or "ucx:<worker> <transports>".
  virtual std::string endpoint() const = 0;
  virtual const char* name() const = 0;  // "tcp" or "ucx"

 private:
  static void wait_staged(const Staged& staged, size_t nbytes) {
    for (size_t ready = 0; ready < nbytes;) ready += staged(ready, nbytes - ready);
  }
};

// COLLECTIVE over bootstrap. remote[pe] says which PEs this PE reaches through the conduit (the
// transpose-consistent view every PE computed). Picks the conduit config.choice asks for; "auto"
// takes UCX when it loads and initialises on every PE (and the heap is host memory), else TCP with
// one INFO line saying why. "ucx" with UCX unusable on some PE fails on every PE, naming it.
std::unique_ptr<Conduit> make_conduit(Bootstrap& bootstrap, const std::vector<uint8_t>& remote, const LocalHeap& heap,
                                      const ConduitConfig& config);

}  // namespace mori::shmem::remote
