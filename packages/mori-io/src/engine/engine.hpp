// SPDX-License-Identifier: MIT
// The native IOEngine: registered memory, known remote engines, the listening server (the target
// side of every backend's control plane and of TCP's data), and the backends in one route chain
// (engine/route.cpp): P2P, then RDMA, then TCP. Python's mori.io.IOEngine wraps this one-to-one
// and decides no route: it hands over the remote MemoryDesc and EngineDesc as they are.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/inbound.hpp"
#include "core/memory.hpp"
#include "core/remote.hpp"
#include "core/status.hpp"
#include "p2p/p2p.hpp"
#include "rdma/rdma.hpp"
#include "tcp/server.hpp"
#include "tcp/tcp.hpp"

namespace mori::io {

struct EngineConfig {
  std::string key;
  std::string host;  // listen address; the Python layer fills loopback when the user gave none
  uint16_t port = 0;
  std::string secret;  // empty: a fresh random one
  std::string node_id;   // this engine's EngineDesc: where it runs, for the P2P route
  std::string hostname;
  int64_t connect_timeout_ms = 5000;
  int64_t handshake_timeout_ms = 2000;  // target side: most time a peer may take to authenticate
  int64_t io_timeout_ms = 30000;  // target side: most time a started frame may take
  uint64_t max_frame_bytes = 64ull << 20;
  uint32_t max_segments = 8192;
  size_t max_connections = 1024;
  size_t max_pending_connections = 64;
  size_t max_inbound_per_peer = 65536;
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

  // Creating the TCP backend again changes its settings; open links carry on.
  void create_tcp_backend(const tcp::TcpConfig& config);
  void remove_tcp_backend();
  bool has_tcp_backend() const;
  // The P2P backend (BackendType.XGMI); throws Error(Unsupported) without a CUDA driver or GPU.
  void create_p2p_backend(const p2p::P2PConfig& config);
  void remove_p2p_backend();
  bool has_p2p_backend() const;
  // The RDMA backend (BackendType.RDMA) on UCX; throws Error(Unsupported) naming why when UCX
  // cannot be loaded or started. Replaces an existing one (whose transfers fail).
  void create_rdma_backend(const ucx::RdmaConfig& config);
  void remove_rdma_backend();
  bool has_rdma_backend() const;
  bool rdma_supports_gpu() const;

  // Makes a remote engine known (from its EngineDesc); registering a key anew reconnects.
  void register_remote(const RemoteEngine& remote);
  void deregister_remote(const std::string& key);
  bool knows_remote(const std::string& key) const;

  // GPU memory: throws Error(Unsupported) without driver or GPU, Error(InvalidArgument) for a
  // device that does not exist or a pointer that is not that device's memory.
  RegisteredMemory register_memory(uintptr_t base, uint64_t size, MemoryLocation loc, int device);
  // Returns once no IO thread touches the memory any more (aborting its connections past
  // op_timeout_ms); throws Error(NotFound) for an unknown id.
  void deregister_memory(uint32_t id);

  uint64_t allocate_uid() { return next_uid_.fetch_add(1); }

  // One transfer between local memory id and a remote engine's memory. Offsets or sizes out of
  // range, or lists of different lengths, give a status failed with ERR_INVALID_ARGS (as MORI's
  // backends report them) before anything is sent; an unknown memory id or engine throws
  // Error(NotFound); runtime failures (no backend, peer unreachable or lost, timeout) come back in
  // the status. Connecting never blocks the caller: the transfer waits for the connection. The
  // backend is the first of the route chain that takes the pair (route.cpp).
  std::shared_ptr<TransferStatus> transfer(bool is_read, uint32_t local_id, const RemoteMemory& remote,
                                           const std::vector<uint64_t>& local_offsets,
                                           const std::vector<uint64_t>& remote_offsets,
                                           const std::vector<uint64_t>& sizes, uint64_t uid);
  // The backend the route chain would try first for the pair, or nullopt when none takes it.
  std::optional<BackendType> first_route(uint32_t local_id, const RemoteMemory& remote);

  std::optional<std::pair<StatusCode, std::string>> pop_inbound(const std::string& remote_key, uint64_t uid);

  // Control-plane checks used by sessions (over RDMA's control connection when that backend
  // exists, else TCP's): the remote memory's registered size; liveness.
  uint64_t query_remote_memory(const std::string& remote_key, uint32_t mem_id);
  bool ping(const std::string& remote_key);

  void shutdown();

 private:
  struct Remote {
    RemoteEngine engine;
    Placement placement;
  };
  // The route chain's slots in MORI's order, the most specific transport first; TCP, which takes
  // every pair, is last.
  static constexpr size_t kP2P = 0, kRdma = 1, kTcp = 2;
  using Chain = std::array<std::shared_ptr<Backend>, kTcp + 1>;  // null where the engine has none
  // A transfer the chain may still hand on: what a fallback needs after the caller returned.
  struct Pending {
    bool is_read = false;
    std::shared_ptr<Region> local;
    RemoteMemory memory;
    std::vector<Segment> segments;
    uint64_t total = 0;
    uint64_t uid = 0;
    std::shared_ptr<TransferStatus> status;
  };

  Chain chain() const;
  std::shared_ptr<const Remote> find_remote(const std::string& key) const;  // null when unknown
  std::shared_ptr<const Remote> remote(const std::string& key) const;  // throws Error(NotFound)
  // Hands the request to the first backend from chain index `from` on that takes it.
  void route(const TransferRequest& request, size_t from);
  // Starts the request on chain[index]; its failures go on down the chain.
  void start_on(const Chain& backends, size_t index, const TransferRequest& request);
  // Backend chain[index] (of type `failed`) failed `pending` (after it started, or could not
  // start it): the next backend that takes it retries it into the same status, or the status
  // reports the failure in the failed backend's words.
  void fail_over(BackendType failed, size_t index, const std::shared_ptr<Pending>& pending, const std::string& why,
                 bool started, bool repeated);
  // route() for a transfer a backend gave up, resolving the remote engine anew.
  void reroute(const std::shared_ptr<Pending>& pending, size_t from);
  // A transfer that failed after it started, on the backends after chain position index; when
  // that cannot start either, its status gets code and "<failures> too: <the reroute's error>".
  void retry_later(const std::shared_ptr<Pending>& pending, size_t index, StatusCode code, const std::string& failures);
  std::shared_ptr<tcp::TcpBackend> tcp_backend() const;
  std::shared_ptr<p2p::P2PBackend> p2p_backend() const;
  std::shared_ptr<ucx::RdmaBackend> rdma_backend() const;
  // What every backend's accessor and remover do to its slot (tcp_, p2p_, rdma_), under state_mutex_.
  template <typename B>
  std::shared_ptr<B> current(const std::shared_ptr<B>& slot) const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return slot;
  }
  template <typename B>
  std::shared_ptr<B> take(std::shared_ptr<B>& slot) {
    std::shared_ptr<B> old;
    std::lock_guard<std::mutex> lock(state_mutex_);
    old.swap(slot);
    return old;
  }
  void check_open() const;  // throws Error(Closed) after shutdown()

  EngineConfig config_;
  int64_t pid_;
  RegionTable regions_;
  InboundTable inbound_;
  std::unique_ptr<Server> server_;
  std::atomic<uint64_t> next_uid_{0};

  mutable std::mutex state_mutex_;  // remotes_, the backends, closed_
  std::map<std::string, std::shared_ptr<const Remote>> remotes_;
  std::shared_ptr<tcp::TcpBackend> tcp_;
  std::shared_ptr<p2p::P2PBackend> p2p_;
  std::shared_ptr<ucx::RdmaBackend> rdma_;
  bool closed_ = false;
};

}  // namespace mori::io
