// SPDX-License-Identifier: MIT
// The native IOEngine: registered memory, known remote engines, the listening server, one peer
// link per remote engine (opened on first use), and a watchdog that fails transfers whose peer
// stays silent past op_timeout_ms. Python's mori.io.IOEngine wraps this one-to-one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/error.hpp"
#include "engine/inbound.hpp"
#include "engine/memory.hpp"
#include "engine/peer_link.hpp"
#include "engine/server.hpp"
#include "engine/status.hpp"
#include "engine/transfer.hpp"
#include "gpu/p2p.hpp"
#include "ucx/backend.hpp"

namespace mori::io {

struct EngineConfig {
  std::string key;
  std::string host;  // listen address; the Python layer fills loopback when the user gave none
  uint16_t port = 0;
  std::string secret;  // empty: a fresh random one
  int64_t connect_timeout_ms = 5000;
  int64_t handshake_timeout_ms = 2000;  // target side: most time a peer may take to authenticate
  int64_t io_timeout_ms = 30000;  // target side: most time a started frame may take
  uint64_t max_frame_bytes = 64ull << 20;
  uint32_t max_segments = 8192;
  size_t max_connections = 1024;
  size_t max_pending_connections = 64;
  size_t max_inbound_per_peer = 65536;
};

struct TcpConfig {
  int num_data_conns = 8;
  uint64_t striping_threshold_bytes = 65536;
  uint64_t min_stripe_bytes = 512 * 1024;
  uint64_t chunk_bytes = 4ull << 20;
  int64_t op_timeout_ms = 30000;
  net::SocketOptions data;
  net::SocketOptions control;
};

// What register_memory tells the Python layer for the MemoryDesc (GPU fields empty for CPU).
struct RegisteredMemory {
  uint32_t id = 0;
  std::string bus_id;
  std::string ipc_handle;
  uint64_t ipc_offset = 0;
};

class Engine {
 public:
  explicit Engine(const EngineConfig& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const std::string& key() const { return config_.key; }
  const std::string& secret() const { return config_.secret; }
  uint16_t port() const;

  void create_tcp_backend(const TcpConfig& config);
  void remove_tcp_backend();
  bool has_tcp_backend() const;
  // The P2P backend (BackendType.XGMI); throws Error(Unsupported) without a CUDA driver or GPU.
  void create_p2p_backend(const gpu::P2PConfig& config);
  void remove_p2p_backend();
  bool has_p2p_backend() const;
  // The RDMA backend (BackendType.RDMA) on UCX; throws Error(Unsupported) naming why when UCX
  // cannot be loaded or started. Replaces an existing one (whose transfers fail).
  void create_rdma_backend(const ucx::RdmaConfig& config);
  void remove_rdma_backend();
  bool has_rdma_backend() const;
  bool rdma_supports_gpu() const;

  void register_remote(const std::string& key, const std::string& host, uint16_t port, const std::string& secret);
  void deregister_remote(const std::string& key);
  bool knows_remote(const std::string& key) const;

  // GPU memory: throws Error(Unsupported) without driver or GPU, Error(InvalidArgument) for a
  // device that does not exist or a pointer that is not that device's memory.
  RegisteredMemory register_memory(uintptr_t base, uint64_t size, MemoryLocation loc, int device);
  // Returns once no IO thread touches the memory any more (aborting its connections past
  // op_timeout_ms); throws Error(NotFound) for an unknown id.
  void deregister_memory(uint32_t id);

  uint64_t allocate_uid() { return next_uid_.fetch_add(1); }

  // One transfer between local memory id and a remote engine's memory id. Offsets or sizes out of
  // range, or lists of different lengths, give a status failed with ERR_INVALID_ARGS (as MORI's
  // backends report them) before anything is sent; an unknown memory id or engine throws
  // Error(NotFound); runtime failures (no backend, peer unreachable or lost, timeout) come back in
  // the status. Connecting never blocks the caller: the transfer waits for the connection. The backend is the first that can take
  // the pair: P2P (given `peer`: the Python layer found both sides GPU memory on one host), RDMA,
  // TCP; when one fails to start or fails, the transfer is retried (logged) on the next.
  std::shared_ptr<TransferStatus> transfer(bool is_read, uint32_t local_id, const std::string& remote_key,
                                           uint32_t remote_id, uint64_t remote_size,
                                           const std::vector<uint64_t>& local_offsets,
                                           const std::vector<uint64_t>& remote_offsets,
                                           const std::vector<uint64_t>& sizes, uint64_t uid,
                                           const gpu::PeerRegion* peer = nullptr);

  std::optional<std::pair<StatusCode, std::string>> pop_inbound(const std::string& remote_key, uint64_t uid);

  // Control-plane checks used by sessions (over RDMA's control connection when that backend
  // exists, else TCP's): the remote memory's registered size; liveness.
  uint64_t query_remote_memory(const std::string& remote_key, uint32_t mem_id);
  bool ping(const std::string& remote_key);

  void shutdown();

 private:
  struct Remote {
    std::string host;
    uint16_t port = 0;
    std::string secret;
  };
  // Called once with the live link, or with null, the error's code and why there is none.
  using LinkWaiter = std::function<void(const std::shared_ptr<PeerLink>&, Code, const std::string&)>;
  struct LinkSlot {
    std::mutex mutex;  // everything below
    std::shared_ptr<PeerLink> link;
    bool connecting = false;
    bool retired = false;  // dropped from links_: it hands out no link any more
    std::string retired_reason;
    std::vector<LinkWaiter> waiters;
    std::thread connector;  // the one connection attempt at a time; joined by the next or by retire()
  };

  // Calls `waiter` with the link to remote_key: at once when a live link exists, else from a
  // connector thread once connecting succeeded or failed (within connect_timeout_ms), so that no
  // caller's thread ever waits on a peer. Throws Error(NotFound/Closed/Unsupported) at once.
  void with_link(const std::string& remote_key, LinkWaiter waiter);
  static void run_connector(LinkSlot* slot, LinkConfig config, std::thread previous, std::shared_ptr<PeerLink> dead);
  // Fails the slot's link, lets its waiters fail and joins its connector.
  static void retire(const std::shared_ptr<LinkSlot>& slot, const std::string& reason);
  // The live link to remote_key, or null when there is none yet (or it died): with_link's fast path.
  std::shared_ptr<PeerLink> live_link(const std::string& remote_key);
  // with_link, waited for: for control requests, which are synchronous in MORI too.
  std::shared_ptr<PeerLink> link_to(const std::string& remote_key);
  ucx::RemoteEngine remote_engine(const std::string& remote_key) const;  // throws Error(NotFound)
  // RDMA when that backend can take the local memory, else (or when RDMA fails) TCP.
  void start_network(const std::shared_ptr<TransferStatus>& status, bool is_read, const std::shared_ptr<Region>& local,
                     const std::string& remote_key, uint32_t remote_id, uint64_t remote_size,
                     const std::vector<Segment>& segments, uint64_t total, uint64_t uid);
  std::shared_ptr<ucx::RdmaBackend> rdma_backend() const;
  // The TCP half of transfer(): frames on the link to remote_key, reporting into status.
  void start_tcp(const std::shared_ptr<TransferStatus>& status, bool is_read, const std::shared_ptr<Region>& local,
                 const std::string& remote_key, uint32_t remote_id, const std::vector<Segment>& segments,
                 uint64_t total, uint64_t uid);
  // Cuts the transfer into frames sized for `link` and queues them on it.
  void post_frames(const std::shared_ptr<PeerLink>& link, const TcpConfig& tcp,
                   const std::shared_ptr<TransferStatus>& status, bool is_read, const std::shared_ptr<Region>& local,
                   uint32_t remote_id, const std::vector<Segment>& segments, uint64_t total, uint64_t uid);
  std::shared_ptr<gpu::P2PBackend> p2p_backend() const;
  void check_open() const;  // throws Error(Closed) after shutdown()
  void drop_links(const std::string& reason);
  void watch(const std::shared_ptr<TransferOp>& op);
  void watchdog_loop();
  // Small transfers' responses that neither a waiter nor a poller read within a millisecond are
  // read by their lanes' receiver threads (PeerLink::wake_unclaimed), checked every watchdog period.
  void wake_unclaimed_responses();
  TcpConfig tcp_config() const;

  EngineConfig config_;
  RegionTable regions_;
  InboundTable inbound_;
  std::unique_ptr<Server> server_;
  std::atomic<uint64_t> next_uid_{0};

  mutable std::mutex state_mutex_;  // remotes_, links_, tcp_
  std::map<std::string, Remote> remotes_;
  std::map<std::string, std::shared_ptr<LinkSlot>> links_;
  std::optional<TcpConfig> tcp_;
  std::shared_ptr<gpu::P2PBackend> p2p_;
  std::shared_ptr<ucx::RdmaBackend> rdma_;
  bool closed_ = false;

  std::mutex watch_mutex_;
  std::condition_variable watch_wake_;
  std::vector<std::shared_ptr<TransferOp>> watched_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace mori::io
