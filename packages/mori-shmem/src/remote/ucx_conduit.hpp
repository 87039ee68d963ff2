// SPDX-License-Identifier: MIT
// NOTE [ucx conduit]
// The UCX conduit of NOTE [remote transport] (conduit.hpp): UCX's UCP, one context and one worker
// per PE, every endpoint in error mode PEER (a dead peer fails its requests instead of hanging
// them). In that mode UCX uses no shared-memory transport and no software-emulated RMA or
// atomics, so over the libucx wheel's UCX (no verbs) the endpoints run over tcp; a system UCX
// built with verbs uses RDMA.
//   - The heap is registered once (ucp_mem_map). Worker addresses, packed rkeys and heap bases go
//     through the bootstrap, which authenticates the job; UCX's own connections are not
//     authenticated (UCX has no such mechanism), so its tcp listeners are kept to the interface
//     the bootstrap uses (MORI_SOCKET_IFNAME, loopback by default) unless UCX_NET_DEVICES says
//     otherwise. Every PE makes one endpoint per remote PE and reads a word through each before
//     init returns, so a broken path fails init, not the first put.
//   - put/get are ucp_put_nbx/ucp_get_nbx into the target's [base, base + size), offsets checked
//     against the heap size first. put waits for local completion (the source is reusable); quiet
//     posts ucp_ep_flush_nbx on every endpoint that carried a put since the last quiet, then waits
//     for all (per endpoint rather than ucp_worker_flush_nbx, so a failure names its PE).
//   - put_signal = put, ucp_ep_flush_nbx (the data is in the target's heap), then the signal.
//     ucp_worker_fence would only order, and whether it orders across lanes (the put on one, the
//     atomic on another) depends on UCX_FENCE_MODE; the flush always holds, for one round trip.
//   - Atomics and signals, MORI_SHMEM_UCX_ATOMICS=am (the default): an active message that the
//     target's progress thread applies through its HeapAccess (CPU atomics on a host heap, the
//     one-thread kernel on a GPU heap) and answers with the old value. That is atomic with the
//     CPU atomics of the target's node-mates, works for every transport and for GPU memory.
//   - MORI_SHMEM_UCX_ATOMICS=ucx: ucp_atomic_op_nbx, always with a reply buffer and waited for, so
//     each is applied (and ordered before the next) when atomic() returns. SET and SIGNAL_SET =
//     swap, FETCH = fetching add of 0, INC = add of 1, COMPARE_SWAP = cswap, the others one to one;
//     32-bit types use a 4-byte datatype. In error mode PEER this needs NIC atomics (init probes
//     one atomic per peer and fails with CONFIG otherwise), and NIC atomics are not atomic with
//     the CPU atomics of the target's node-mates: for jobs where no word is shared that way.
//   - Progress: active messages (and UCX's wire-up) need the target to progress, so a thread per
//     PE sleeps on the worker's event fd and progresses it; callers progress while they wait. The
//     worker is SERIALIZED and one mutex guards every UCP call (callbacks run with it held).
//   - Deadlines: every wait is bounded by MORI_SHMEM_WAIT_TIMEOUT. On a timeout the endpoint is
//     closed by force, which cancels what is outstanding on it (nothing lands in caller memory
//     afterwards); an endpoint error (UCX saw the peer fail) fails its requests. The peer is then
//     lost: that call gives TIMEOUT or PEER_LOST naming it, later calls PEER_LOST at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/socket.hpp"
#include "remote/conduit.hpp"
#include "remote/ucx_api.hpp"

namespace mori::shmem::remote {

class UcxConduit final : public Conduit {
 public:
  // The local half: opens UCX, makes the context and the worker, registers the heap and starts the
  // progress thread; no communication. Throws Error(UNSUPPORTED) when UCX is unusable here.
  UcxConduit(int rank, int nranks, const LocalHeap& heap, uint64_t heap_size, const ConduitConfig& config);
  ~UcxConduit() override;
  UcxConduit(const UcxConduit&) = delete;
  UcxConduit& operator=(const UcxConduit&) = delete;

  // COLLECTIVE over bootstrap: exchanges addresses and rkeys and connects to every remote PE.
  void connect(Bootstrap& bootstrap, const std::vector<uint8_t>& remote);

  void put(int pe, uint64_t offset, const void* src, size_t nbytes) override;
  void get(int pe, uint64_t offset, void* dest, size_t nbytes) override;
  void put_signal(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset, uint64_t signal,
                  int sig_op) override;
  void signal(int pe, uint64_t signal_offset, uint64_t signal, int sig_op) override;
  uint64_t atomic(int pe, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) override;
  void quiet() override;
  std::string endpoint() const override { return endpoint_; }
  const char* name() const override { return "ucx"; }

 private:
  struct Peer {
    Peer(UcxConduit* owner_, int pe_, uint64_t base_) : owner(owner_), pe(pe_), base(base_) {}
    UcxConduit* owner;
    int pe;
    uint64_t base;                   // where the target's heap starts, in the target's address space
    ucx::ucp_ep_h ep = nullptr;      // null once retired (mutex_)
    ucx::ucp_rkey_h rkey = nullptr;  // destroyed with the conduit
    void* closing = nullptr;         // the forced close of ep, released with the conduit (mutex_)
    std::string lost;                // why the peer is given up; "" while it is reachable (mutex_)
    std::atomic<bool> dirty{false};  // carried a put, signal or atomic since the last quiet
  };
  struct AmoWait {
    bool answered = false;  // mutex_
    int32_t status = 0;
    uint64_t old = 0;
  };

  // ucx_conduit.cpp: setup, teardown, progress, waiting.
  void open_context();
  void register_heap();
  void start_progress();
  void progress_loop();
  void connect_peer(Peer& peer, const void* address, const void* rkey);
  void close_all() noexcept;
  std::string transports(Peer& peer);
  Peer& peer(int pe);
  // Waits for what a *_nbx call returned, progressing the worker, and releases it; any failure is
  // the loss of that peer (PEER_LOST, or TIMEOUT past the deadline).
  void finish(Peer& peer, ucx::ucs_status_ptr_t request, const Deadline& deadline, const char* what);
  // Progresses until done() (called with mutex_ held) is true.
  void progress_until(Peer& peer, const std::function<bool()>& done, const Deadline& deadline, const char* what);
  [[noreturn]] void give_up(Peer& peer, void* request, const char* what);
  [[noreturn]] void lost(Peer& peer, ucx::ucs_status_t status, const char* what);
  void retire(Peer& peer, const std::string& why);  // mutex_ held
  ucx::ucp_ep_h usable(Peer& peer, const char* what);  // mutex_ held; throws PEER_LOST once lost
  static void on_endpoint_error(void* arg, ucx::ucp_ep_h ep, ucx::ucs_status_t status);

  // ucx_rma.cpp: the operations.
  void check_range(int pe, uint64_t offset, uint64_t length, uint64_t alignment, const char* what) const;
  void flush(Peer& peer, const char* what);
  // Starts the deadline of one operation, posts its *_nbx request with mutex_ held (post(endpoint)
  // returns it) and finish()es it.
  template <typename Post>
  void post_and_finish(Peer& peer, const char* what, Post&& post);
  uint64_t ucx_atomic(Peer& peer, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare);
  uint64_t am_atomic(Peer& peer, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare);
  void register_am_handlers();
  static ucx::ucs_status_t on_amo_request(void* arg, const void* header, size_t header_length, void* data,
                                          size_t length, const ucx::ucp_am_recv_param_t* param);
  static ucx::ucs_status_t on_amo_answer(void* arg, const void* header, size_t header_length, void* data,
                                         size_t length, const ucx::ucp_am_recv_param_t* param);

  const ucx::Api& api_;
  int rank_;
  LocalHeap heap_;
  uint64_t heap_size_;
  ConduitConfig config_;
  bool am_atomics_ = false;
  ucx::ucp_context_h context_ = nullptr;
  ucx::ucp_worker_h worker_ = nullptr;
  ucx::ucp_mem_h memh_ = nullptr;
  std::mutex mutex_;  // every UCP call; callbacks run with it held
  std::vector<std::unique_ptr<Peer>> peers_;  // by PE; null when not remote
  std::map<uint64_t, AmoWait*> pending_;      // am atomics awaiting their answer, by token (mutex_)
  uint64_t next_token_ = 1;                   // mutex_
  int event_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> stopping_{false};
  std::thread progress_;
  std::string endpoint_;
};

}  // namespace mori::shmem::remote
