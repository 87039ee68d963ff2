// SPDX-License-Identifier: MIT
// NOTE [remote transport]
// How a PE reaches the heap of a PE it cannot load/store (another host, or P2P disabled): over
// TCP, to a server thread in the target's process that applies each request to its own heap.
//   - Each PE listens on MORI_SOCKET_IFNAME (loopback by default); the endpoints travel through
//     the bootstrap, so no port needs configuring.
//   - Each PE opens MORI_SHMEM_REMOTE_STREAMS connections to every remote PE; large puts and gets
//     are striped over them. A connection proves the job secret (HMAC-SHA256 over the server's
//     nonce) before anything else is read; one that does not is dropped and logged.
//   - Host memory is sent from and received into place (no staging copy).
//   - Completion: puts pipeline; quiet sends FLUSH on every stream that carried puts since the last
//     quiet and waits for the answers, so after quiet every earlier put is in the target's heap.
//     A put-with-signal travels on one stream as one request, so its signal lands after its data.
//   - Every blocking step has a deadline (MORI_SHMEM_WAIT_TIMEOUT); a dead or stuck peer gives
//     PEER_LOST or TIMEOUT naming it, never a hang.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/socket.hpp"
#include "remote/heap_access.hpp"

namespace mori::shmem::remote {

struct ConduitConfig {
  int streams = 2;               // connections per remote PE
  size_t stripe_bytes = 1 << 20;  // transfers above this are split over the streams
  double timeout_s = 300;         // deadline of each blocking step
  std::string ifname;            // "" = loopback
};

class TcpConduit {
 public:
  // COLLECTIVE over bootstrap. remote[pe] says which PEs this PE reaches through the conduit; the
  // vector must be the transpose-consistent view every PE computed (pe is remote to me iff I am
  // remote to pe). heap: this PE's heap, which the server writes and reads (kept, not owned).
  TcpConduit(Bootstrap& bootstrap, const std::vector<uint8_t>& remote, HeapAccess& heap, const ConduitConfig& config);
  ~TcpConduit();
  TcpConduit(const TcpConduit&) = delete;
  TcpConduit& operator=(const TcpConduit&) = delete;

  // Offsets are heap offsets of the target PE; callers have checked them against the heap size.
  void put(int pe, uint64_t offset, const void* src, size_t nbytes);
  void get(int pe, uint64_t offset, void* dest, size_t nbytes);
  void put_signal(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset, uint64_t signal,
                  int sig_op);
  void signal(int pe, uint64_t signal_offset, uint64_t signal, int sig_op);
  uint64_t atomic(int pe, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare);
  // Waits until every put issued before it (by any thread of this PE) is applied at its target.
  void quiet();
  // "ip:port" this PE's server listens on (for diagnostics and tests).
  std::string endpoint() const;

 private:
  struct Stream;
  struct Peer;
  struct Inbound;

  Stream& pick(int pe, size_t index);
  template <typename Exchange>
  void striped(int pe, size_t nbytes, Exchange&& exchange);
  void send_request(Stream& stream, const void* request, const void* payload, size_t nbytes);
  void stop() noexcept;
  void close_stop_pipe() noexcept;
  void accept_loop();
  void serve(Inbound* inbound);
  void serve_one(Inbound& inbound);
  void close_inbound(Socket& socket);

  int rank_;
  HeapAccess& heap_;
  uint64_t heap_size_;
  ConduitConfig config_;
  Secret secret_;
  std::string ip_;
  Socket listener_;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Peer>> peers_;  // by PE; null when not remote
  std::mutex inbound_mutex_;
  std::vector<std::unique_ptr<Inbound>> inbound_;
  std::thread acceptor_;
};

}  // namespace mori::shmem::remote
