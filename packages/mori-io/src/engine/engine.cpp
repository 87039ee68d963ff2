// SPDX-License-Identifier: MIT
#include "engine/engine.hpp"

#include <algorithm>
#include <chrono>
#include <future>

#include "crypto/hmac.hpp"
#include "engine/error.hpp"
#include "engine/log.hpp"
#include "gpu/device.hpp"

namespace mori::io {

namespace {

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(20);
constexpr size_t kSecretBytes = 32;

std::string range_text(uint64_t offset, uint64_t size) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(size) + ")";
}

}  // namespace

Engine::Engine(const EngineConfig& config) : config_(config), inbound_(config.max_inbound_per_peer) {
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
  watchdog_ = std::thread([this] { watchdog_loop(); });
  MORI_IO_LOG(Info, "engine '" << config_.key << "' listens on " << config_.host << ":" << server_->port());
}

Engine::~Engine() { shutdown(); }

void Engine::check_open() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    closed_ = true;
  }
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  watch_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (auto p2p = p2p_backend()) p2p->stop();
  server_->set_rdma(nullptr);
  if (auto rdma = rdma_backend()) rdma->stop();
  drop_links("the engine was shut down");
  server_->stop();
}

uint16_t Engine::port() const { return server_->port(); }

void Engine::create_tcp_backend(const TcpConfig& config) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
  tcp_ = config;
}

void Engine::remove_tcp_backend() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    tcp_.reset();
  }
  drop_links("the TCP backend was removed");
}

bool Engine::has_tcp_backend() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return tcp_.has_value();
}

void Engine::create_p2p_backend(const gpu::P2PConfig& config) {
  auto backend = std::make_shared<gpu::P2PBackend>(config);
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
  p2p_ = std::move(backend);  // a replaced backend finishes its transfers when its last user lets go
}

void Engine::remove_p2p_backend() {
  std::shared_ptr<gpu::P2PBackend> old;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    old.swap(p2p_);
  }
  if (old) old->stop();
}

bool Engine::has_p2p_backend() const { return p2p_backend() != nullptr; }

std::shared_ptr<gpu::P2PBackend> Engine::p2p_backend() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return p2p_;
}

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
    backend->stop();
    throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
  }
  server_->set_rdma(backend);
  if (old) old->stop();
}

void Engine::remove_rdma_backend() {
  std::shared_ptr<ucx::RdmaBackend> old;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    old.swap(rdma_);
  }
  server_->set_rdma(nullptr);
  if (old) old->stop();
}

bool Engine::has_rdma_backend() const { return rdma_backend() != nullptr; }

bool Engine::rdma_supports_gpu() const {
  auto rdma = rdma_backend();
  return rdma && rdma->supports_gpu();
}

std::shared_ptr<ucx::RdmaBackend> Engine::rdma_backend() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return rdma_;
}

ucx::RemoteEngine Engine::remote_engine(const std::string& remote_key) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  auto it = remotes_.find(remote_key);
  if (it == remotes_.end()) {
    throw Error(Code::NotFound, "remote engine '" + remote_key + "' is not registered; call register_remote_engine");
  }
  return ucx::RemoteEngine{remote_key, it->second.host, it->second.port, it->second.secret};
}

TcpConfig Engine::tcp_config() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return *tcp_;
}

void Engine::register_remote(const std::string& key, const std::string& host, uint16_t port,
                             const std::string& secret) {
  std::shared_ptr<LinkSlot> stale;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    remotes_[key] = Remote{host, port, secret};
    auto it = links_.find(key);
    if (it != links_.end()) {
      stale = it->second;  // a re-registered engine may have moved: reconnect on next use
      links_.erase(it);
    }
  }
  if (stale) retire(stale, "the remote engine was registered anew");
  if (auto rdma = rdma_backend()) rdma->forget_remote(key, "the remote engine was registered anew");
}

void Engine::deregister_remote(const std::string& key) {
  std::shared_ptr<LinkSlot> slot;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    remotes_.erase(key);
    auto it = links_.find(key);
    if (it != links_.end()) {
      slot = it->second;
      links_.erase(it);
    }
  }
  if (slot) retire(slot, "the remote engine was deregistered");
  if (auto p2p = p2p_backend()) p2p->forget_engine(key);
  if (auto rdma = rdma_backend()) rdma->forget_remote(key, "the remote engine was deregistered");
}

bool Engine::knows_remote(const std::string& key) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return remotes_.count(key) != 0;
}

void Engine::drop_links(const std::string& reason) {
  std::map<std::string, std::shared_ptr<LinkSlot>> slots;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    slots.swap(links_);
  }
  for (auto& entry : slots) retire(entry.second, reason);
}

void Engine::retire(const std::shared_ptr<LinkSlot>& slot, const std::string& reason) {
  std::shared_ptr<PeerLink> link;
  std::thread connector;
  {
    std::lock_guard<std::mutex> lock(slot->mutex);
    slot->retired = true;
    slot->retired_reason = reason;
    link = std::move(slot->link);
    connector = std::move(slot->connector);
  }
  if (link) link->fail(reason);
  link.reset();  // joins its threads, which exit at once
  // A connection attempt ends within connect_timeout_ms and then fails its waiters with `reason`.
  if (connector.joinable()) {
    if (connector.get_id() == std::this_thread::get_id()) {
      connector.detach();  // retired from one of its own waiters: it returns right after
    } else {
      connector.join();
    }
  }
}

void Engine::with_link(const std::string& remote_key, LinkWaiter waiter) {
  std::shared_ptr<LinkSlot> slot;
  LinkConfig link;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (closed_) throw Error(Code::Closed, "engine '" + config_.key + "' is shut down");
    auto remote = remotes_.find(remote_key);
    if (remote == remotes_.end()) {
      throw Error(Code::NotFound, "remote engine '" + remote_key + "' is not registered; call register_remote_engine");
    }
    if (!tcp_) throw Error(Code::Unsupported, "No available backend found, create backend first");
    auto& entry = links_[remote_key];
    if (!entry) entry = std::make_shared<LinkSlot>();
    slot = entry;
    link.local_key = config_.key;
    link.remote_key = remote_key;
    link.host = remote->second.host;
    link.port = remote->second.port;
    link.secret = remote->second.secret;
    link.lanes = tcp_->num_data_conns;
    link.connect_timeout_ms = config_.connect_timeout_ms;
    link.data_options = tcp_->data;
    link.control_options = tcp_->control;
  }
  std::unique_lock<std::mutex> lock(slot->mutex);
  if (slot->retired) {
    std::string why = "connection to engine '" + remote_key + "' closed: " + slot->retired_reason;
    lock.unlock();
    waiter(nullptr, Code::Connection, why);
    return;
  }
  if (slot->link && !slot->link->dead()) {
    std::shared_ptr<PeerLink> live = slot->link;
    lock.unlock();
    waiter(live, Code::Internal, std::string());
    return;
  }
  slot->waiters.push_back(std::move(waiter));
  if (slot->connecting) return;
  slot->connecting = true;
  // The previous attempt's thread and the dead link are let go of by the new thread, so this
  // caller waits for neither.
  std::thread previous = std::move(slot->connector);
  std::shared_ptr<PeerLink> dead = std::move(slot->link);
  slot->connector = std::thread(run_connector, slot.get(), std::move(link), std::move(previous), std::move(dead));
}

void Engine::run_connector(LinkSlot* slot, LinkConfig config, std::thread previous, std::shared_ptr<PeerLink> dead) {
  if (previous.joinable()) previous.join();
  dead.reset();
  std::shared_ptr<PeerLink> link;
  Code code = Code::Internal;
  std::string error;
  try {
    link = PeerLink::open(config);
  } catch (const Error& e) {
    code = e.code();
    error = e.what();
  } catch (const std::exception& e) {
    code = Code::System;
    error = "cannot connect to engine '" + config.remote_key + "': " + e.what();
  }
  std::vector<LinkWaiter> waiters;
  std::shared_ptr<PeerLink> orphan;
  {
    std::lock_guard<std::mutex> lock(slot->mutex);
    slot->connecting = false;
    if (slot->retired && link) {
      code = Code::Connection;
      error = "connection to engine '" + config.remote_key + "' closed: " + slot->retired_reason;
      orphan = std::move(link);
    }
    slot->link = link;
    waiters.swap(slot->waiters);
  }
  if (orphan) orphan->fail(error);
  orphan.reset();
  for (auto& waiter : waiters) waiter(link, code, error);
}

std::shared_ptr<PeerLink> Engine::live_link(const std::string& remote_key) {
  std::shared_ptr<LinkSlot> slot;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (closed_ || !tcp_) return nullptr;
    auto it = links_.find(remote_key);
    if (it == links_.end()) return nullptr;
    slot = it->second;
  }
  std::lock_guard<std::mutex> lock(slot->mutex);
  if (slot->retired || !slot->link || slot->link->dead()) return nullptr;
  return slot->link;
}

std::shared_ptr<PeerLink> Engine::link_to(const std::string& remote_key) {
  struct Result {
    std::shared_ptr<PeerLink> link;
    Code code = Code::Internal;
    std::string error;
  };
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  with_link(remote_key, [promise](const std::shared_ptr<PeerLink>& link, Code code, const std::string& error) {
    promise->set_value(Result{link, code, error});
  });
  Result result = future.get();
  if (!result.link) throw Error(result.code, result.error);
  return result.link;
}

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
  // Mapped for UCX now, as MORI's backends register memory at registration time; a failure only
  // sends this region's transfers over another backend.
  if (auto rdma = rdma_backend()) rdma->map_region(region);
  return out;
}

void Engine::deregister_memory(uint32_t id) {
  std::shared_ptr<Region> region = regions_.remove(id);
  if (!region) throw Error(Code::NotFound, "memory id " + std::to_string(id) + " is not registered");
  int64_t grace_ms = 30000;
  std::shared_ptr<ucx::RdmaBackend> rdma;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (tcp_ && tcp_->op_timeout_ms > 0) grace_ms = tcp_->op_timeout_ms;
    rdma = rdma_;
    if (rdma && rdma->config().op_timeout_ms > 0) grace_ms = std::max(grace_ms, rdma->config().op_timeout_ms);
  }
  std::unique_lock<std::mutex> lock(region->mutex);
  if (!region->idle.wait_for(lock, std::chrono::milliseconds(grace_ms), [&] { return region->users == 0; })) {
    lock.unlock();
    MORI_IO_LOG(Warning, "memory id " << id << " still in use " << grace_ms
                                      << " ms after deregistration began; aborting the connections that use it");
    server_->abort_users_of(id);
    drop_links("memory id " + std::to_string(id) + " was deregistered while a transfer used it");
    if (rdma) rdma->abort_users_of(id);
    lock.lock();
    region->idle.wait(lock, [&] { return region->users == 0; });
  }
  lock.unlock();
  // Every transfer that used the mapping has finished; a backend replaced meanwhile unmapped
  // its own mappings when it stopped.
  if (auto current = rdma_backend()) current->unmap_region(id);
}

std::shared_ptr<TransferStatus> Engine::transfer(bool is_read, uint32_t local_id, const std::string& remote_key,
                                                 uint32_t remote_id, uint64_t remote_size,
                                                 const std::vector<uint64_t>& local_offsets,
                                                 const std::vector<uint64_t>& remote_offsets,
                                                 const std::vector<uint64_t>& sizes, uint64_t uid,
                                                 const gpu::PeerRegion* peer) {
  check_open();
  const size_t n = sizes.size();
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
  // One per thread: every path below copies what it keeps beyond this call.
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
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (remotes_.count(remote_key) == 0) {
      throw Error(Code::NotFound, "remote engine '" + remote_key + "' is not registered; call register_remote_engine");
    }
  }
  auto status = std::make_shared<TransferStatus>(StatusCode::IN_PROGRESS);
  std::shared_ptr<Region> region = local_pin.shared();
  std::shared_ptr<gpu::P2PBackend> p2p = peer != nullptr && local.loc == MemoryLocation::GPU ? p2p_backend() : nullptr;
  if (p2p) {
    std::string remote = remote_key;
    // The failover retries the whole transfer over the network into the same status: the P2P
    // copies have finished (or failed) by then, so the two never write the destination at once.
    gpu::Fallback fallback = [this, status, is_read, region, remote, remote_id, remote_size, segments = segments, total,
                              uid](const std::string& why) {
      if (!has_tcp_backend() && !has_rdma_backend()) {
        MORI_IO_LOG(Warning, "P2P transfer " << uid << " to engine '" << remote << "' failed: " << why);
        status->update(StatusCode::ERR_GPU_OP,
                       "P2P transfer failed: " + why + " (and no RDMA or TCP backend to fall back to)");
        return;
      }
      MORI_IO_LOG(Warning, "P2P transfer " << uid << " to engine '" << remote << "' failed (" << why
                                           << "); retrying it over the network");
      try {
        start_network(status, is_read, region, remote, remote_id, remote_size, segments, total, uid);
      } catch (const Error& e) {
        status->update(StatusCode::ERR_GPU_OP, "P2P failed (" + why + ") and the retry too: " + e.what());
      }
    };
    // The waiter completes the copies it waits for itself, sparing the hand-over from the
    // backend's completion thread. Weak: a status may outlive the backend.
    status->set_progress([backend = std::weak_ptr<gpu::P2PBackend>(p2p), raw = status.get()] {
      if (auto b = backend.lock()) b->progress(raw);
    });
    std::string why;
    if (!p2p->submit(is_read, RegionPin(region), *peer, segments, status, fallback, &why)) {
      fallback("could not start: " + why);
    }
    return status;
  }
  start_network(status, is_read, region, remote_key, remote_id, remote_size, segments, total, uid);
  return status;
}

void Engine::start_network(const std::shared_ptr<TransferStatus>& status, bool is_read,
                           const std::shared_ptr<Region>& local, const std::string& remote_key, uint32_t remote_id,
                           uint64_t remote_size, const std::vector<Segment>& segments, uint64_t total, uint64_t uid) {
  std::shared_ptr<ucx::RdmaBackend> rdma = rdma_backend();
  if (!rdma || (local->loc == MemoryLocation::GPU && !rdma->supports_gpu())) {
    start_tcp(status, is_read, local, remote_key, remote_id, segments, total, uid);
    return;
  }
  // An RDMA transfer that fails is retried over TCP into the same status; RDMA reports the
  // failure only once every one of its UCX requests is done, so the two never overlap.
  auto fallback = [this, status, is_read, local, remote_key, remote_id, segments, total,
                   uid](const std::string& why) {
    if (!has_tcp_backend()) {
      MORI_IO_LOG(Info, "RDMA transfer " << uid << " to engine '" << remote_key << "' failed: " << why);
      status->update(StatusCode::ERR_RDMA_OP, why + " (and no TCP backend to fall back to)");
      return;
    }
    MORI_IO_LOG(Warning, "RDMA transfer " << uid << " to engine '" << remote_key << "' failed (" << why
                                          << "); retrying it over TCP");
    try {
      start_tcp(status, is_read, local, remote_key, remote_id, segments, total, uid);
    } catch (const Error& e) {
      status->update(StatusCode::ERR_RDMA_OP, "RDMA failed (" + why + ") and TCP too: " + e.what());
    }
  };
  ucx::Submission submission;
  submission.is_read = is_read;
  submission.local = RegionPin(local);
  submission.remote = remote_engine(remote_key);
  submission.remote_id = remote_id;
  submission.remote_size = remote_size;
  submission.segments = segments;
  submission.uid = uid;
  submission.status = status;
  submission.fallback = fallback;
  std::string why;
  bool repeated = false;
  if (rdma->submit(std::move(submission), &why, &repeated)) return;
  if (!has_tcp_backend()) {
    status->update(StatusCode::ERR_RDMA_OP, "RDMA transfer could not start: " + why + " (and no TCP backend)");
    return;
  }
  // The backend logged the reason the first time; every transfer to that peer goes this way
  // until it is asked again.
  if (!repeated) MORI_IO_LOG(Warning, "RDMA transfer " << uid << " could not start; sending it over TCP");
  start_tcp(status, is_read, local, remote_key, remote_id, segments, total, uid);
}

void Engine::start_tcp(const std::shared_ptr<TransferStatus>& status, bool is_read,
                       const std::shared_ptr<Region>& local, const std::string& remote_key, uint32_t remote_id,
                       const std::vector<Segment>& segments, uint64_t total, uint64_t uid) {
  if (!has_tcp_backend()) {
    status->update(StatusCode::ERR_BAD_STATE, "No available backend found, create backend first");
    return;
  }
  TcpConfig tcp = tcp_config();
  // A live link takes the frames at once: no closure, no copies of the segments.
  if (std::shared_ptr<PeerLink> live = live_link(remote_key)) {
    post_frames(live, tcp, status, is_read, local, remote_id, segments, total, uid);
    return;
  }
  // Pinned while the transfer waits for its connection: deregister_memory waits for it too.
  auto pin = std::make_shared<RegionPin>(local);
  try {
    with_link(remote_key, [this, tcp, status, is_read, local, pin, remote_id, segments, total, uid](
                              const std::shared_ptr<PeerLink>& link, Code, const std::string& error) {
      if (!link) {
        status->update(StatusCode::ERR_BAD_STATE, error);
        return;
      }
      post_frames(link, tcp, status, is_read, local, remote_id, segments, total, uid);
    });
  } catch (const Error& e) {
    if (e.code() == Code::Closed) throw;
    status->update(StatusCode::ERR_BAD_STATE, e.what());
  }
}

void Engine::post_frames(const std::shared_ptr<PeerLink>& link, const TcpConfig& tcp,
                         const std::shared_ptr<TransferStatus>& status, bool is_read,
                         const std::shared_ptr<Region>& local, uint32_t remote_id, const std::vector<Segment>& segments,
                         uint64_t total, uint64_t uid) {
  // Transfers from striping_threshold up are spread over the lanes, in frames of at least
  // min_stripe_bytes (smaller pieces cost more in per-frame work and thread wake-ups than the
  // parallel lanes gain) and at most the chunk and the target's frame limit.
  const uint64_t lanes = link->lane_count();
  uint64_t spread = total < tcp.striping_threshold_bytes
                        ? total
                        : std::max<uint64_t>(tcp.min_stripe_bytes, (total + lanes - 1) / lanes);
  FramePlan plan;
  plan.frame_bytes = std::max<uint64_t>(1, std::min({spread, tcp.chunk_bytes, link->limits().max_frame_bytes}));
  plan.max_segments = std::min<uint32_t>(config_.max_segments, link->limits().max_segments);

  auto op = std::make_shared<TransferOp>();
  op->status = status;
  op->link = link;
  op->deadline = net::after_ms(tcp.op_timeout_ms);
  op->uid = uid;
  op->timeout_ms = tcp.op_timeout_ms;
  thread_local std::vector<std::shared_ptr<Frame>> frames;
  frames.clear();
  build_frames(op, is_read, uid, remote_id, segments, local, plan, frames);
  op->remaining.store(static_cast<uint32_t>(frames.size()));
  if (tcp.op_timeout_ms > 0) watch(op);
  link->submit(frames);
  frames.clear();
}

std::optional<std::pair<StatusCode, std::string>> Engine::pop_inbound(const std::string& remote_key, uint64_t uid) {
  return inbound_.pop(remote_key, uid);
}

uint64_t Engine::query_remote_memory(const std::string& remote_key, uint32_t mem_id) {
  check_open();
  // Over RDMA's control connection when that backend exists: the answer also brings the rkey the
  // session's transfers will need. A peer without RDMA is asked over TCP instead.
  if (auto rdma = rdma_backend()) {
    try {
      return rdma->query_remote_memory(remote_engine(remote_key), mem_id);
    } catch (const Error& e) {
      if (e.code() == Code::NotFound || !has_tcp_backend()) throw;
      MORI_IO_LOG(Debug, "memory query over RDMA failed (" << e.what() << "); asking over TCP");
    }
  }
  return link_to(remote_key)->query_memory(mem_id, config_.connect_timeout_ms);
}

bool Engine::ping(const std::string& remote_key) {
  try {
    if (auto rdma = rdma_backend()) {
      try {
        rdma->ping(remote_engine(remote_key));
        return true;
      } catch (const Error&) {
        if (!has_tcp_backend()) throw;
      }
    }
    link_to(remote_key)->ping(config_.connect_timeout_ms);
    return true;
  } catch (const Error& e) {
    MORI_IO_LOG(Info, "ping of engine '" << remote_key << "' failed: " << e.what());
    return false;
  }
}

void Engine::wake_unclaimed_responses() {
  std::vector<std::shared_ptr<LinkSlot>> slots;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    for (auto& entry : links_) slots.push_back(entry.second);
  }
  for (auto& slot : slots) {
    std::shared_ptr<PeerLink> link;
    {
      std::lock_guard<std::mutex> lock(slot->mutex);
      link = slot->link;
    }
    if (link) link->wake_unclaimed();
  }
}

void Engine::watch(const std::shared_ptr<TransferOp>& op) {
  std::lock_guard<std::mutex> lock(watch_mutex_);
  watched_.push_back(op);
}

void Engine::watchdog_loop() {
  std::vector<std::shared_ptr<TransferOp>> expired;
  std::unique_lock<std::mutex> lock(watch_mutex_);
  while (!stopping_) {
    watch_wake_.wait_for(lock, kWatchdogPeriod);
    auto now = net::Clock::now();
    auto keep = std::remove_if(watched_.begin(), watched_.end(), [&](const std::shared_ptr<TransferOp>& op) {
      if (op->remaining.load(std::memory_order_acquire) == 0) return true;
      if (now < op->deadline) return false;
      expired.push_back(op);
      return true;
    });
    watched_.erase(keep, watched_.end());
    lock.unlock();
    wake_unclaimed_responses();
    if (expired.empty()) {
      lock.lock();
      continue;
    }
    // A transfer past its deadline means the peer stopped answering: the link is failed, which
    // reports every frame still on it once its sockets have let go of the memory.
    for (auto& op : expired) {
      if (auto link = op->link.lock()) {
        link->fail("transfer " + std::to_string(op->uid) + " got no answer within op_timeout_ms=" +
                   std::to_string(op->timeout_ms));
      }
    }
    expired.clear();
    lock.lock();
  }
}

}  // namespace mori::io
