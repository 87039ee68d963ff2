// SPDX-License-Identifier: MIT
// NOTE [tcp conduit]
// The TCP conduit of NOTE [remote transport] (conduit.hpp): over TCP, to a server thread in the
// target's process that applies each request to its own heap.
//   - Each PE listens on MORI_SOCKET_IFNAME (loopback by default); the endpoints travel through
//     the bootstrap, so no port needs configuring.
//   - Each PE opens MORI_SHMEM_REMOTE_STREAMS connections to every remote PE; large puts and gets
//     are striped over them, by the caller and the threads of a StripeCrew. A connection proves
//     the job secret (HMAC-SHA256 over the server's nonce) before anything else is read; one that
//     does not is dropped and logged. Until then a connection has no thread of its own (NOTE
//     [handshake gate]); each authenticated one is served by a thread that is joined as soon as
//     the connection ends, and at most nranks * streams are served at once.
//   - Host memory is sent from and received into place (no staging copy).
//   - Completion: puts pipeline; quiet sends FLUSH on every stream that carried puts since the last
//     quiet and waits for the answers, so after quiet every earlier put is in the target's heap.
//     A put-with-signal travels on one stream as one request, so its signal lands after its data;
//     above the stripe size, as a part per stream (NOTE [striped put-with-signal], signal_joins.hpp).
//     Atomics wait for the server's answer, so they are applied when atomic() returns.
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
#include "bootstrap/handshake_gate.hpp"
#include "bootstrap/socket.hpp"
#include "remote/conduit.hpp"
#include "remote/heap_access.hpp"
#include "remote/signal_joins.hpp"
#include "remote/stripe_crew.hpp"

namespace mori::shmem::remote {

class TcpConduit final : public Conduit {
 public:
  // COLLECTIVE over bootstrap. remote[pe] says which PEs this PE reaches through the conduit; the
  // vector must be the transpose-consistent view every PE computed (pe is remote to me iff I am
  // remote to pe). heap: this PE's heap, which the server writes and reads (kept, not owned).
  TcpConduit(Bootstrap& bootstrap, const std::vector<uint8_t>& remote, HeapAccess& heap, const ConduitConfig& config);
  ~TcpConduit() override;
  TcpConduit(const TcpConduit&) = delete;
  TcpConduit& operator=(const TcpConduit&) = delete;

  // Offsets are heap offsets of the target PE; callers have checked them against the heap size.
  void put(int pe, uint64_t offset, const void* src, size_t nbytes) override {
    put_from(pe, offset, src, nbytes, nullptr);
  }
  void get(int pe, uint64_t offset, void* dest, size_t nbytes) override;
  void put_signal(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset, uint64_t signal,
                  int sig_op) override {
    put_signal_from(pe, offset, src, nbytes, signal_offset, signal, sig_op, nullptr);
  }
  // Each stripe's header goes out at once, its payload as `staged` says it is in place.
  void put_staged(int pe, uint64_t offset, const void* src, size_t nbytes, const Staged& staged) override {
    put_from(pe, offset, src, nbytes, &staged);
  }
  void put_signal_staged(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset,
                         uint64_t signal, int sig_op, const Staged& staged) override {
    put_signal_from(pe, offset, src, nbytes, signal_offset, signal, sig_op, &staged);
  }
  void signal(int pe, uint64_t signal_offset, uint64_t signal, int sig_op) override;
  size_t stripe_bytes(int pe, size_t nbytes) const override;
  uint64_t atomic(int pe, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) override;
  // Waits until every put issued before it (by any thread of this PE) is applied at its target.
  void quiet() override;
  // "ip:port" this PE's server listens on.
  std::string endpoint() const override;
  const char* name() const override { return "tcp"; }

 private:
  struct Stream;
  struct Peer;
  struct Inbound;

  Stream& pick(int pe, size_t index);
  // How many streams an nbytes transfer to pe is striped over.
  size_t stripes_for(int pe, size_t nbytes) const;
  template <typename Exchange>
  void striped(int pe, size_t nbytes, Exchange&& exchange);
  void put_from(int pe, uint64_t offset, const void* src, size_t nbytes, const Staged* staged);
  void put_signal_from(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset,
                       uint64_t signal, int sig_op, const Staged* staged);
  // Sends the request, then nbytes of payload (src + begin on, as *staged says they are in place
  // when staged is given).
  void send_request(Stream& stream, const void* request, const uint8_t* src = nullptr, size_t begin = 0,
                    size_t nbytes = 0, const Staged* staged = nullptr);
  void stop() noexcept;
  void close_stop_pipe() noexcept;
  void accept_loop();
  void admit(Arrival& arrival, HandshakeGate& gate);
  void reap_inbound();
  void serve(Inbound* inbound);
  void serve_one(Inbound& inbound);
  void close_inbound(Socket& socket);

  int rank_;
  HeapAccess& heap_;
  uint64_t heap_size_;
  ConduitConfig config_;
  size_t max_inbound_;  // authenticated connections served at once: every PE's streams
  std::unique_ptr<StripeCrew> crew_;  // helpers for the streams past the first
  Secret secret_;
  std::string ip_;
  Socket listener_;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Peer>> peers_;  // by PE; null when not remote
  SignalJoins joins_;  // of the striped puts-with-signal this PE serves
  std::mutex inbound_mutex_;
  std::vector<std::unique_ptr<Inbound>> inbound_;
  std::thread acceptor_;
};

}  // namespace mori::shmem::remote
