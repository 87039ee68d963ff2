// SPDX-License-Identifier: MIT
// The RDMA backend (MORI's BackendType.RDMA) on UCX's UCP API: one context and one worker per
// backend, the worker driven by its own thread (worker.hpp). Registered regions are mapped with
// ucp_mem_map and their packed rkeys handed to peers over mori.io's authenticated control
// connection (RDMA_CONNECT / RDMA_KEY, ucx/wire.hpp), which also carries the worker address;
// UCX itself authenticates nobody, so nothing UCX-specific is published anywhere else. A
// transfer is checked against the region its owner reported, cut into ucp_put_nbx/ucp_get_nbx
// operations over the peer's endpoints (lanes), flushed (writes), then announced to the target
// with an active message that the target acknowledges once it recorded the inbound transfer.
// A transport error hands the transfer to the next backend of the engine's route chain (TCP); a
// peer silent past op_timeout_ms fails it (ERR_RDMA_OP) and closes its endpoints.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.hpp"
#include "backend/control.hpp"
#include "core/inbound.hpp"
#include "core/memory.hpp"
#include "core/segment.hpp"
#include "core/status.hpp"
#include "ucx/context.hpp"
#include "rdma/peer.hpp"
#include "ucx/runner.hpp"
#include "ucx/worker.hpp"

namespace mori::io::ucx {

constexpr int kMaxLanes = 64;

// MORI's PollCqMode values: how the worker waits for completions (RdmaConfig::polling).
enum class PollCqMode : int { POLLING = 0, EVENT = 1 };

struct RdmaConfig {
  std::string lib_dir;      // where libucp.so.0 is; empty: the system's
  std::string net_devices;  // UCX_NET_DEVICES for the context; empty: UCX's choice
  int lanes = 1;            // qp_per_transfer: UCP endpoints per peer, 1 to kMaxLanes
  int post_batch = 256;     // post_batch_size: operations a transfer posts per progress pass
  bool polling = true;      // poll_cq_mode POLLING (spin briefly before sleeping) or EVENT
  bool notify = true;       // enable_notification
  uint64_t chunk_bytes = 0;  // enable_transfer_chunking ? chunk_bytes : 0
  uint32_t max_chunks = 64;
  int64_t op_timeout_ms = 30000;  // 0: none
  int64_t control_timeout_ms = 5000;
};

// A transfer handed to the backend: the engine already checked offsets and sizes against the
// local region and the remote MemoryDesc.
struct Submission {
  bool is_read = false;
  RegionPin local;
  RemoteEngine remote;
  uint32_t remote_id = 0;
  uint64_t remote_size = 0;  // what the initiator's MemoryDesc claims
  std::vector<Segment> segments;
  uint64_t uid = 0;
  std::shared_ptr<TransferStatus> status;
  Fallback fallback;
};

class RdmaBackend : public Backend, public RdmaResponder, private WorkerClient {
 public:
  // Throws Error(Unsupported) naming why when UCX cannot be loaded or started.
  RdmaBackend(const RdmaConfig& config, const std::string& engine_key, RegionTable& regions, InboundTable& inbound);
  ~RdmaBackend() override;
  RdmaBackend(const RdmaBackend&) = delete;
  RdmaBackend& operator=(const RdmaBackend&) = delete;

  bool supports_gpu() const { return context_.supports_cuda(); }

  // Backend: any pair whose local memory UCX can reach (host memory, GPU memory with CUDA support).
  BackendType type() const override { return BackendType::RDMA; }
  bool can_route(const TransferRequest& request) const override;
  bool submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) override;
  int64_t op_timeout_ms() const override { return config_.op_timeout_ms; }
  void forget_remote(const std::string& key, const std::string& reason, bool deregistered) override;
  void stop(const std::string& reason) override;
  const RdmaConfig& config() const { return config_; }

  // Starts the transfer and returns true: from then on the status completes, or `fallback` is
  // called (off the worker thread) with the reason RDMA failed. Returns false with *why when it
  // could not start (no byte moved; `fallback` is not called); *repeated says the reason is one
  // already logged for this peer.
  bool submit(Submission submission, std::string* why, bool* repeated);
  // The size of the remote region as its owner reports it (caching its rkey); throws Error.
  uint64_t query_remote_memory(const RemoteEngine& remote, uint32_t mem_id);
  // Throws Error when the remote engine does not answer on the control connection.
  void ping(const RemoteEngine& remote);

  // Maps a newly registered region now (errors logged: its transfers then go over TCP).
  void map_region(const std::shared_ptr<Region>& region) override;
  // Unmaps a deregistered region; call once nothing uses it any more.
  void unmap_region(uint32_t id) override;
  // Closes the endpoints of every transfer using local region id (deregistration timed out).
  void abort_users_of(uint32_t id) override;
  // Drops the connection to a remote engine; its transfers in flight fail.
  void forget_remote(const std::string& key, const std::string& reason);
  // Fails what is in flight, closes every endpoint, unmaps every region, stops the threads.
  void stop();

  // RdmaResponder, on server connection threads.
  std::string connect_info(const std::string& peer_key) override;
  std::string memory_key(uint32_t mem_id) override;

 private:
  struct Slot {
    std::mutex connect_mutex;
    std::shared_ptr<Peer> peer;
    net::Deadline retry_after = net::Clock::time_point::min();
    std::string refusal;
  };
  struct Mapping {
    ucp_mem_h memh = nullptr;
    std::string rkey;
    uint64_t base = 0;
    uint64_t size = 0;
  };
  struct AckSend;

  // Caller side (application and server threads).
  std::shared_ptr<Peer> connect(const RemoteEngine& remote, std::string* why, bool* repeated);
  // The cached region, or (refresh, or none cached) the owner's answer to RDMA_KEY, unpacked.
  std::shared_ptr<RemoteRegion> remote_memory(const std::shared_ptr<Peer>& peer, uint32_t mem_id,
                                              bool refresh = false);
  Mapping mapping_of(const RegionPin& pin);  // maps on first use
  void retire(const std::shared_ptr<Peer>& peer, const std::string& reason, bool fall_back);

  // Worker thread (progress.cpp).
  void on_start(ucp_worker_h worker) override;
  Tick on_tick() override;
  void on_stop() override;
  // device >= 0: GPU memory of that CUDA device.
  Mapping map_on_worker(uint32_t id, uintptr_t base, uint64_t size, int device);
  void create_endpoints(const std::shared_ptr<Peer>& peer, const std::string& address);
  void unpack_rkeys(Peer& peer, RemoteRegion& memory, const std::string& packed);
  void start(const std::shared_ptr<Op>& op);
  void schedule(Op& op);
  void advance(Op& op);
  void post_pieces(Op& op);
  void start_flush(Op& op);
  void start_notify(Op& op);
  void finish(Op& op);
  void teardown(const std::shared_ptr<Peer>& peer, const std::string& reason, bool fall_back);
  void reap_peers();
  void check_deadlines();
  void request_done(Op& op, ucs_status_t status);
  void handle_notify(const void* header, size_t length, const ucp_am_recv_param_t* param);
  void handle_ack(const void* header, size_t length);
  void ep_failed(Peer* peer, ucs_status_t status);
  ucp_request_param_t op_param(Op& op) const;
  bool track(Op& op, ucs_status_ptr_t request, const char* failure);

  static void on_request_done(void* request, ucs_status_t status, void* user_data);
  static void on_close_done(void* request, ucs_status_t status, void* user_data);
  static void on_ack_sent(void* request, ucs_status_t status, void* user_data);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_notify(void* arg, const void* header, size_t header_length, void* data, size_t length,
                                const ucp_am_recv_param_t* param);
  static ucs_status_t on_ack(void* arg, const void* header, size_t header_length, void* data, size_t length,
                             const ucp_am_recv_param_t* param);

  RdmaConfig config_;
  std::string engine_key_;
  RegionTable& regions_;
  InboundTable& inbound_;
  Context context_;
  Runner runner_;
  std::atomic<uint64_t> next_seq_{1};
  std::atomic<bool> stopped_{false};

  std::mutex slots_mutex_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;

  std::mutex tokens_mutex_;
  std::map<wire::Token, std::string> token_keys_;
  std::map<std::string, wire::Token> key_tokens_;

  // worker
  ucp_worker_h handle_ = nullptr;
  std::unordered_map<uint64_t, std::shared_ptr<Op>> ops_;
  std::vector<Op*> ready_;
  std::vector<std::shared_ptr<Peer>> peers_;  // connected or closing
  std::vector<std::pair<Peer*, std::string>> failed_;  // endpoints UCX reported broken
  std::unordered_map<uint32_t, Mapping> mappings_;
  int acks_in_flight_ = 0;
  bool stopping_ = false;
  net::Deadline next_deadline_check_ = net::Clock::time_point::min();

  // Last: started once everything it calls into exists, stopped first.
  std::unique_ptr<Worker> worker_;
};

}  // namespace mori::io::ucx
