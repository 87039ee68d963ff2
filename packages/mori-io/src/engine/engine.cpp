// SPDX-License-Identifier: MIT
#include "engine/engine.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "core/log.hpp"
#include "crypto/hmac.hpp"
#include "gpu/device.hpp"

namespace mori::io {

namespace {

constexpr size_t kSecretBytes = 32;

std::string range_text(uint64_t offset, uint64_t size) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(size) + ")";
}

std::string not_registered(const std::string& key) {
  return "remote engine '" + key + "' is not registered; call register_remote_engine";
}

}  // namespace

Engine::Engine(const EngineConfig& config)
    : config_(config), pid_(static_cast<int64_t>(::getpid())), inbound_(config.max_inbound_per_peer) {
  if (config_.key.empty() || config_.key.size() > net::kMaxKeyBytes) {
    throw Error(Code::InvalidArgument, "key must have 1 to " + std::to_string(net::kMaxKeyBytes) + " bytes, got " +
                                           std::to_string(config_.key.size()));
  }
  if (config_.secret.empty()) {
    config_.secret.resize(kSecretBytes);
    crypto::fill_random(reinterpret_cast<uint8_t*>(config_.secret.data()), kSecretBytes);
  }
  ServerConfig server;
  server.key = config_.key;
  server.secret = config_.secret;
  server.host = config_.host;
  server.port = config_.port;
  // A target accepts at least what every initiator clamps its announcement up to; a smaller
  // setting only narrows the frames this engine sends.
  server.limits = net::clamp(net::TargetLimits{config_.max_frame_bytes, config_.max_segments});
  server.handshake_timeout_ms = config_.handshake_timeout_ms;
  server.io_timeout_ms = config_.io_timeout_ms;
  server.max_connections = config_.max_connections;
  server.max_pending_connections = config_.max_pending_connections;
  server_ = std::make_unique<Server>(server, regions_, inbound_);
  MORI_IO_LOG(Info, "engine '" << config_.key << "' listens on " << config_.host << ":" << server_->port());
}

Engine::~Engine() { shutdown(); }

void Engine::check_open() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
}

void Engine::shutdown() {
  std::shared_ptr<p2p::P2PBackend> p2p;
  std::shared_ptr<ucx::RdmaBackend> rdma;
  std::shared_ptr<tcp::TcpBackend> tcp;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (closed_) return;
    closed_ = true;
    p2p = p2p_;
    rdma = rdma_;
    tcp = tcp_;
  }
  const std::string reason = "the engine was shut down";
  if (p2p) p2p->stop(reason);
  server_->set_rdma(nullptr);
  if (rdma) rdma->stop(reason);
  if (tcp) tcp->stop(reason);
  server_->stop();
}

uint16_t Engine::port() const { return server_->port(); }

// -- backends ---------------------------------------------------------------------------------

void Engine::create_tcp_backend(const tcp::TcpConfig& config) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
  if (tcp_) {
    tcp_->reconfigure(config);
    return;
  }
  tcp_ = std::make_shared<tcp::TcpBackend>(
      config, tcp::LinkDefaults{config_.key, config_.connect_timeout_ms, config_.max_segments});
}

void Engine::remove_tcp_backend() {
  if (auto old = take(tcp_)) old->stop("the TCP backend was removed");
}

bool Engine::has_tcp_backend() const { return tcp_backend() != nullptr; }

std::shared_ptr<tcp::TcpBackend> Engine::tcp_backend() const { return current(tcp_); }

void Engine::create_p2p_backend(const p2p::P2PConfig& config) {
  auto backend = std::make_shared<p2p::P2PBackend>(config);
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
  p2p_ = std::move(backend);  // a replaced backend finishes its transfers when its last user lets go
}

void Engine::remove_p2p_backend() {
  if (auto old = take(p2p_)) old->stop("the P2P backend was removed");
}

bool Engine::has_p2p_backend() const { return p2p_backend() != nullptr; }

std::shared_ptr<p2p::P2PBackend> Engine::p2p_backend() const { return current(p2p_); }

void Engine::create_rdma_backend(const ucx::RdmaConfig& config) {
  check_open();
  ucx::RdmaConfig c = config;
  c.control_timeout_ms = config_.connect_timeout_ms;
  auto backend = std::make_shared<ucx::RdmaBackend>(c, config_.key, regions_, inbound_);
  std::shared_ptr<ucx::RdmaBackend> old;
  bool installed = false;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!closed_) {
      old = std::move(rdma_);
      rdma_ = backend;
      installed = true;
    }
  }
  if (!installed) {
    backend->stop("the engine was shut down");
    throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
  }
  server_->set_rdma(backend);
  if (old) old->stop("the RDMA backend was replaced");
}

void Engine::remove_rdma_backend() {
  std::shared_ptr<ucx::RdmaBackend> old = take(rdma_);
  server_->set_rdma(nullptr);
  if (old) old->stop("the RDMA backend was removed");
}

bool Engine::has_rdma_backend() const { return rdma_backend() != nullptr; }

bool Engine::rdma_supports_gpu() const {
  auto rdma = rdma_backend();
  return rdma && rdma->supports_gpu();
}

std::shared_ptr<ucx::RdmaBackend> Engine::rdma_backend() const { return current(rdma_); }

Engine::Chain Engine::chain() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  Chain backends;
  backends[kP2P] = p2p_;
  backends[kRdma] = rdma_;
  backends[kTcp] = tcp_;
  return backends;
}

// -- remote engines ---------------------------------------------------------------------------

std::shared_ptr<const Engine::Remote> Engine::find_remote(const std::string& key) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  auto it = remotes_.find(key);
  return it == remotes_.end() ? nullptr : it->second;
}

std::shared_ptr<const Engine::Remote> Engine::remote(const std::string& key) const {
  auto found = find_remote(key);
  if (!found) throw Error(Code::NotFound, not_registered(key));
  return found;
}

void Engine::register_remote(const RemoteEngine& remote) {
  auto entry = std::make_shared<Remote>();
  entry->engine = remote;
  // MORI's rule: the node id (boot id or MORI_NODE_ID), falling back to the hostname.
  entry->placement.same_host = !remote.node_id.empty() && !config_.node_id.empty()
                                   ? remote.node_id == config_.node_id
                                   : remote.hostname == config_.hostname;
  entry->placement.same_process =
      entry->placement.same_host && remote.pid == pid_ && remote.hostname == config_.hostname;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    remotes_[remote.key] = std::move(entry);
  }
  // A re-registered engine may have moved: every backend reconnects on next use.
  for (const auto& backend : chain()) {
    if (backend) backend->forget_remote(remote.key, "the remote engine was registered anew", false);
  }
}

void Engine::deregister_remote(const std::string& key) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    remotes_.erase(key);
  }
  Chain backends = chain();
  // TCP first, then P2P and RDMA, as before the backends shared one interface.
  if (backends[kTcp]) backends[kTcp]->forget_remote(key, "the remote engine was deregistered", true);
  for (size_t i = 0; i < kTcp; ++i) {
    if (backends[i]) backends[i]->forget_remote(key, "the remote engine was deregistered", true);
  }
}

bool Engine::knows_remote(const std::string& key) const { return find_remote(key) != nullptr; }

// -- memory -----------------------------------------------------------------------------------

RegisteredMemory Engine::register_memory(uintptr_t base, uint64_t size, MemoryLocation loc, int device) {
  check_open();
  if (loc != MemoryLocation::CPU && loc != MemoryLocation::GPU) {
    throw Error(Code::InvalidArgument, "mem_loc must be CPU or GPU");
  }
  if (base == 0 && size != 0) throw Error(Code::InvalidArgument, "ptr=0 (a null pointer) with size " +
                                                                     std::to_string(size));
  RegisteredMemory out;
  if (loc == MemoryLocation::GPU) {
    gpu::check_device(device);
    gpu::GpuRange range = gpu::inspect(base, size, device);
    out.bus_id = range.bus_id;
    // Exported at registration, as MORI's XGMI backend does, so the MemoryDesc a peer receives
    // can be opened there. Memory that cannot be exported (VMM) still moves over TCP.
    std::string why;
    out.ipc_handle = gpu::ipc_handle(device, range.alloc_base, &why);
    out.ipc_offset = base - range.alloc_base;
    if (out.ipc_handle.empty()) {
      MORI_IO_LOG(Info, "GPU memory at " << base << " has no CUDA IPC handle (" << why
                                         << "); peers in other processes will reach it over TCP");
    }
  }
  std::shared_ptr<Region> region = regions_.add(base, size, loc, device);
  out.id = region->id;
  // Registered with the backends that need it now, as MORI's backends register memory at
  // registration time; a failure only sends this region's transfers over another backend.
  for (const auto& backend : chain()) {
    if (backend) backend->map_region(region);
  }
  return out;
}

void Engine::deregister_memory(uint32_t id) {
  std::shared_ptr<Region> region = regions_.remove(id);
  if (!region) throw Error(Code::NotFound, "memory id " + std::to_string(id) + " is not registered");
  Chain backends = chain();
  // The TCP backend's op_timeout_ms (30 s without one), or a longer one of another backend.
  int64_t grace_ms =
      backends[kTcp] && backends[kTcp]->op_timeout_ms() > 0 ? backends[kTcp]->op_timeout_ms() : 30000;
  for (size_t i = 0; i < kTcp; ++i) {
    if (backends[i]) grace_ms = std::max(grace_ms, backends[i]->op_timeout_ms());
  }
  std::unique_lock<std::mutex> lock(region->mutex);
  if (!region->idle.wait_for(lock, std::chrono::milliseconds(grace_ms), [&] { return region->users == 0; })) {
    lock.unlock();
    MORI_IO_LOG(Warning, "memory id " << id << " still in use " << grace_ms
                                      << " ms after deregistration began; aborting the connections that use it");
    server_->abort_users_of(id);
    if (backends[kTcp]) backends[kTcp]->abort_users_of(id);
    for (size_t i = 0; i < kTcp; ++i) {
      if (backends[i]) backends[i]->abort_users_of(id);
    }
    lock.lock();
    region->idle.wait(lock, [&] { return region->users == 0; });
  }
  lock.unlock();
  // Every transfer that used the region has finished; a backend replaced meanwhile released its
  // own registrations when it stopped.
  for (const auto& backend : chain()) {
    if (backend) backend->unmap_region(id);
  }
}

// -- transfers --------------------------------------------------------------------------------

std::shared_ptr<TransferStatus> Engine::transfer(bool is_read, uint32_t local_id, const RemoteMemory& remote_memory,
                                                 const std::vector<uint64_t>& local_offsets,
                                                 const std::vector<uint64_t>& remote_offsets,
                                                 const std::vector<uint64_t>& sizes, uint64_t uid) {
  check_open();
  const size_t n = sizes.size();
  const uint64_t remote_size = remote_memory.size;
  // MORI's backends report bad offsets, sizes and list lengths in the status (ERR_INVALID_ARGS).
  auto invalid = [](const std::string& message) {
    auto status = std::make_shared<TransferStatus>(StatusCode::IN_PROGRESS);
    status->update(StatusCode::ERR_INVALID_ARGS, message);
    return status;
  };
  if (local_offsets.size() != n || remote_offsets.size() != n) {
    return invalid("lengths of local offsets, remote offsets or sizes mismatch: local_offsets, remote_offsets and "
                   "sizes must have one entry per transfer; got " + std::to_string(local_offsets.size()) + ", " +
                   std::to_string(remote_offsets.size()) + " and " + std::to_string(n));
  }
  RegionPin local_pin = regions_.pin(local_id);
  if (!local_pin) {
    throw Error(Code::NotFound, "local memory id " + std::to_string(local_id) + " is not registered with engine '" +
                                    config_.key + "'");
  }
  const Region& local = *local_pin.get();
  // One per thread: every backend copies what it keeps beyond this call.
  thread_local std::vector<Segment> segments;
  segments.resize(n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!local.contains(local_offsets[i], sizes[i])) {
      return invalid("length out of range: local_offsets[" + std::to_string(i) + "], sizes[" + std::to_string(i) +
                     "] = " + range_text(local_offsets[i], sizes[i]) + " exceeds the local memory's size " +
                     std::to_string(local.size));
    }
    if (remote_offsets[i] > remote_size || sizes[i] > remote_size - remote_offsets[i]) {
      return invalid("length out of range: remote_offsets[" + std::to_string(i) + "], sizes[" + std::to_string(i) +
                     "] = " + range_text(remote_offsets[i], sizes[i]) + " exceeds the remote memory's size " +
                     std::to_string(remote_size));
    }
    segments[i] = Segment{local_offsets[i], remote_offsets[i], sizes[i]};
    total += sizes[i];
  }
  std::shared_ptr<const Remote> peer = remote(remote_memory.engine_key);
  TransferRequest request;
  request.is_read = is_read;
  request.local = local_pin.shared();
  request.engine = &peer->engine;
  request.placement = peer->placement;
  request.memory = &remote_memory;
  request.segments = &segments;
  request.total = total;
  request.uid = uid;
  request.status = std::make_shared<TransferStatus>(StatusCode::IN_PROGRESS);
  route(request, 0);
  return request.status;
}

std::optional<BackendType> Engine::first_route(uint32_t local_id, const RemoteMemory& remote_memory) {
  RegionPin local_pin = regions_.pin(local_id);
  if (!local_pin) {
    throw Error(Code::NotFound, "local memory id " + std::to_string(local_id) + " is not registered with engine '" +
                                    config_.key + "'");
  }
  std::shared_ptr<const Remote> peer = remote(remote_memory.engine_key);
  TransferRequest request;
  request.local = local_pin.shared();
  request.engine = &peer->engine;
  request.placement = peer->placement;
  request.memory = &remote_memory;
  for (const auto& backend : chain()) {
    if (backend && backend->can_route(request)) return backend->type();
  }
  return std::nullopt;
}

std::optional<std::pair<StatusCode, std::string>> Engine::pop_inbound(const std::string& remote_key, uint64_t uid) {
  return inbound_.pop(remote_key, uid);
}

// -- control plane ----------------------------------------------------------------------------

uint64_t Engine::query_remote_memory(const std::string& remote_key, uint32_t mem_id) {
  check_open();
  // Over RDMA's control connection when that backend exists: the answer also brings the rkey the
  // session's transfers will need. A peer without RDMA is asked over TCP instead.
  if (auto rdma = rdma_backend()) {
    try {
      return rdma->query_remote_memory(remote(remote_key)->engine, mem_id);
    } catch (const Error& e) {
      if (e.code() == Code::NotFound || !has_tcp_backend()) throw;
      MORI_IO_LOG(Debug, "memory query over RDMA failed (" << e.what() << "); asking over TCP");
    }
  }
  std::shared_ptr<const Remote> peer = remote(remote_key);
  auto tcp = tcp_backend();
  if (!tcp) throw Error(Code::Unsupported, "No available backend found, create backend first");
  return tcp->query_memory(peer->engine, mem_id);
}

bool Engine::ping(const std::string& remote_key) {
  try {
    check_open();
    if (auto rdma = rdma_backend()) {
      try {
        rdma->ping(remote(remote_key)->engine);
        return true;
      } catch (const Error&) {
        if (!has_tcp_backend()) throw;
      }
    }
    std::shared_ptr<const Remote> peer = remote(remote_key);
    auto tcp = tcp_backend();
    if (!tcp) throw Error(Code::Unsupported, "No available backend found, create backend first");
    tcp->ping(peer->engine);
    return true;
  } catch (const Error& e) {
    MORI_IO_LOG(Info, "ping of engine '" << remote_key << "' failed: " << e.what());
    return false;
  }
}

}  // namespace mori::io
