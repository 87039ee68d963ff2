// SPDX-License-Identifier: MIT
// The RDMA backend's caller side: what application threads (submit, sessions) and the server's
// connection threads (the RDMA control requests) do. UCX itself is only touched on the worker
// thread (progress.cpp); these functions hand it tasks.
#include "rdma/rdma.hpp"

#include <algorithm>

#include "crypto/hmac.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/take.hpp"
#include "ucx/loader.hpp"

namespace mori::io::ucx {

namespace {

// A peer that refused RDMA (no backend there, unreachable) is asked again after this long; in
// between its transfers go straight to the fallback.
constexpr auto kRetryAfter = std::chrono::seconds(5);
// Tokens kept for initiators (one per key); the oldest go first past this.
constexpr size_t kMaxTokens = 4096;

std::string range_text(uint64_t offset, uint64_t size) {
  return "[" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(size) + ")";
}

}  // namespace

RdmaBackend::RdmaBackend(const RdmaConfig& config, const std::string& engine_key, RegionTable& regions,
                         InboundTable& inbound)
    : config_(config),
      engine_key_(engine_key),
      regions_(regions),
      inbound_(inbound),
      context_(ContextOptions{config.lib_dir, config.net_devices, "mori-io:" + engine_key}) {
  if (config_.lanes < 1 || config_.lanes > kMaxLanes) {
    throw Error(Code::InvalidArgument, "qp_per_transfer=" + std::to_string(config_.lanes) + " is out of range [1, " +
                                           std::to_string(kMaxLanes) + "]");
  }
  config_.post_batch = std::max(1, config_.post_batch);
  WorkerOptions options;
  options.name = "mori-io:" + engine_key;
  options.polling = config_.polling;
  worker_ = std::make_unique<Worker>(context_, static_cast<WorkerClient&>(*this), options);
  MORI_IO_LOG(Info, "RDMA backend of engine '" << engine_key << "' on UCX " << context_.api().major << "."
                                               << context_.api().minor << "." << context_.api().release << " ("
                                               << config_.lanes << " endpoint(s) per peer)");
}

RdmaBackend::~RdmaBackend() { stop(); }

void RdmaBackend::stop() {
  if (stopped_.exchange(true)) return;
  worker_->stop();
  runner_.stop();
  std::lock_guard<std::mutex> lock(slots_mutex_);
  slots_.clear();
}

std::shared_ptr<Peer> RdmaBackend::connect(const RemoteEngine& remote, std::string* why, bool* repeated) {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard<std::mutex> lock(slots_mutex_);
    auto& entry = slots_[remote.key];
    if (!entry) entry = std::make_shared<Slot>();
    slot = entry;
  }
  std::lock_guard<std::mutex> lock(slot->connect_mutex);
  if (slot->peer && !slot->peer->dead.load()) return slot->peer;
  if (net::Clock::now() < slot->retry_after) {
    *why = slot->refusal;
    *repeated = true;
    return nullptr;
  }
  auto peer = std::make_shared<Peer>();
  peer->owner = this;
  peer->key = remote.key;
  peer->description = "engine '" + remote.key + "' at " + remote.host + ":" + std::to_string(remote.port);
  try {
    peer->control = std::make_unique<ControlChannel>(engine_key_, remote, config_.control_timeout_ms);
    ControlChannel::Answer answer = peer->control->request(net::FrameType::RdmaConnect, 0, config_.control_timeout_ms);
    if (answer.code != StatusCode::SUCCESS) throw Error(Code::NotFound, answer.message);
    wire::ConnectInfo info = wire::decode_connect_info(answer.payload);
    peer->token = info.token;
    // By value: a call that times out returns while the task may still run later.
    worker_->call<bool>(
        [this, peer, address = info.address] {
          create_endpoints(peer, address);
          return true;
        },
        config_.control_timeout_ms);
  } catch (const Error& e) {
    retire(peer, e.what(), false);  // endpoints made before the failure, if any, are closed
    slot->peer.reset();
    slot->refusal = "RDMA to " + peer->description + " is unavailable: " + e.what();
    slot->retry_after = net::Clock::now() + kRetryAfter;
    MORI_IO_LOG(Warning, slot->refusal);
    *why = slot->refusal;
    *repeated = false;
    return nullptr;
  }
  slot->peer = peer;
  MORI_IO_LOG(Debug, "RDMA connected to " << peer->description << " over " << config_.lanes << " endpoint(s)");
  return peer;
}

std::shared_ptr<RemoteRegion> RdmaBackend::remote_memory(const std::shared_ptr<Peer>& peer, uint32_t mem_id,
                                                         bool refresh) {
  if (!refresh) {
    std::lock_guard<std::mutex> lock(peer->memories_mutex);
    auto it = peer->memories.find(mem_id);
    if (it != peer->memories.end()) return it->second;
  }
  ControlChannel::Answer answer;
  try {
    answer = peer->control->request(net::FrameType::RdmaKey, mem_id, config_.control_timeout_ms);
  } catch (const Error& e) {
    retire(peer, e.what(), true);
    throw;
  }
  if (answer.code == StatusCode::ERR_NOT_FOUND) {
    std::lock_guard<std::mutex> lock(peer->memories_mutex);
    auto it = peer->memories.find(mem_id);
    if (it != peer->memories.end()) {  // deregistered there: forget its rkey
      peer->retired.push_back(std::move(it->second));
      peer->memories.erase(it);
    }
    throw Error(Code::NotFound, peer->description + ": " + answer.message);
  }
  if (answer.code != StatusCode::SUCCESS) {
    throw Error(Code::Unsupported, peer->description + " cannot serve memory id " + std::to_string(mem_id) +
                                       " over RDMA: " + answer.message);
  }
  wire::MemoryKey key = wire::decode_memory_key(answer.payload);
  auto memory = std::make_shared<RemoteRegion>();
  memory->id = mem_id;
  memory->base = key.base;
  memory->size = key.size;
  memory->packed = key.rkey;
  {
    std::lock_guard<std::mutex> lock(peer->memories_mutex);
    auto it = peer->memories.find(mem_id);
    if (it != peer->memories.end() && it->second->base == key.base && it->second->size == key.size &&
        it->second->packed == key.rkey) {
      return it->second;  // unchanged since it was cached
    }
  }
  if (!key.rkey.empty()) {
    worker_->call<bool>(
        [this, peer, memory, packed = key.rkey] {
          unpack_rkeys(*peer, *memory, packed);
          return true;
        },
        config_.control_timeout_ms);
  }
  // The rkeys replaced here may still serve transfers in flight: they go with the peer's.
  std::lock_guard<std::mutex> lock(peer->memories_mutex);
  auto& slot = peer->memories[mem_id];
  if (slot) peer->retired.push_back(std::move(slot));
  slot = memory;
  return memory;
}

RdmaBackend::Mapping RdmaBackend::mapping_of(const RegionPin& pin) {
  const Region& region = *pin.get();
  const uint32_t id = region.id;
  const uintptr_t base = region.base;
  const uint64_t size = region.size;
  const int device = region.loc == MemoryLocation::GPU ? region.device : -1;
  if (device >= 0 && !context_.supports_cuda()) {
    throw Error(Code::Unsupported, "this UCX has no CUDA support (its cuda transports did not load)");
  }
  return worker_->call<Mapping>([this, id, base, size, device] { return map_on_worker(id, base, size, device); },
                                config_.control_timeout_ms);
}

void RdmaBackend::map_region(const std::shared_ptr<Region>& region) {
  if (region->loc == MemoryLocation::GPU && !context_.supports_cuda()) return;
  try {
    mapping_of(RegionPin(region));
  } catch (const Error& e) {
    MORI_IO_LOG(Warning, "memory id " << region->id << " could not be registered with UCX (" << e.what()
                                      << "); its transfers will use another backend");
  }
}

void RdmaBackend::unmap_region(uint32_t id) {
  // Waited for, so that deregister_memory returns with UCX no longer registered on the memory.
  try {
    worker_->call<bool>(
        [this, id] {
          auto it = mappings_.find(id);
          if (it == mappings_.end()) return false;
          if (it->second.memh != nullptr) context_.unmap(it->second.memh);
          mappings_.erase(it);
          return true;
        },
        config_.control_timeout_ms);
  } catch (const Error& e) {
    // Stopping (which unmaps everything) or a wedged worker thread: nothing left to do here.
    MORI_IO_LOG(Debug, "memory id " << id << " was not unmapped here: " << e.what());
  }
}

void RdmaBackend::abort_users_of(uint32_t id) {
  worker_->post([this, id] {
    std::vector<std::shared_ptr<Peer>> peers;
    for (auto& entry : ops_) {
      if (entry.second->pin.get()->id == id) peers.push_back(entry.second->peer);
    }
    for (auto& peer : peers) {
      teardown(peer, "memory id " + std::to_string(id) + " was deregistered while a transfer used it", false);
    }
  });
}

void RdmaBackend::retire(const std::shared_ptr<Peer>& peer, const std::string& reason, bool fall_back) {
  peer->dead.store(true);
  worker_->post([this, peer, reason, fall_back] { teardown(peer, reason, fall_back); });
}

void RdmaBackend::forget_remote(const std::string& key, const std::string& reason) {
  const std::shared_ptr<Slot> slot = take_locked(slots_mutex_, slots_, key);
  if (!slot) return;
  std::lock_guard<std::mutex> lock(slot->connect_mutex);
  if (slot->peer) retire(slot->peer, reason, false);
  slot->peer.reset();
}

bool RdmaBackend::submit(Submission s, std::string* why, bool* repeated) {
  *repeated = false;
  if (stopped_.load()) {
    *why = "the RDMA backend was removed";
    return false;
  }
  std::shared_ptr<Peer> peer = connect(s.remote, why, repeated);
  if (!peer) return false;
  std::shared_ptr<RemoteRegion> memory;
  try {
    memory = remote_memory(peer, s.remote_id);
  } catch (const Error& e) {
    if (e.code() == Code::NotFound) {  // the owner says so: final, as TCP's target would answer
      s.status->update(StatusCode::ERR_NOT_FOUND, e.what());
      return true;
    }
    *why = e.what();
    return false;
  }
  // The owner's word on the region's size is the bound: a stale or forged MemoryDesc must not
  // reach past what the target registered.
  if (memory->size != s.remote_size) {
    s.status->update(StatusCode::ERR_INVALID_ARGS,
                     "remote memory id " + std::to_string(s.remote_id) + " of " + peer->description + " has " +
                         std::to_string(memory->size) + " bytes, the MemoryDesc says " +
                         std::to_string(s.remote_size) + " (a stale descriptor?)");
    return true;
  }
  for (size_t i = 0; i < s.segments.size(); ++i) {
    const Segment& seg = s.segments[i];
    if (seg.remote_offset > memory->size || seg.size > memory->size - seg.remote_offset) {
      s.status->update(StatusCode::ERR_INVALID_ARGS, "remote_offsets[" + std::to_string(i) + "], sizes[" +
                                                         std::to_string(i) + "] = " +
                                                         range_text(seg.remote_offset, seg.size) +
                                                         " exceeds memory id " + std::to_string(s.remote_id) +
                                                         " of " + peer->description);
      return true;
    }
  }
  auto op = std::make_shared<Op>();
  try {
    Mapping local = mapping_of(s.local);
    op->memh = local.memh;
  } catch (const Error& e) {
    *why = std::string("the local memory cannot be registered with UCX: ") + e.what();
    return false;
  }
  op->owner = this;
  op->seq = next_seq_.fetch_add(1);
  op->is_read = s.is_read;
  op->uid = s.uid;
  op->status = s.status;
  op->local_base = s.local.get()->base;
  op->device = s.local.get()->loc == MemoryLocation::GPU ? s.local.get()->device : -1;
  op->pin = std::move(s.local);
  op->peer = peer;
  op->remote = memory;
  op->fallback = std::move(s.fallback);
  op->timeout_ms = config_.op_timeout_ms;
  op->deadline = net::after_ms(config_.op_timeout_ms);
  PlanOptions plan;
  plan.lanes = static_cast<uint32_t>(config_.lanes);
  plan.first_lane = static_cast<uint32_t>(s.uid % static_cast<uint64_t>(config_.lanes));
  plan.chunk_bytes = config_.chunk_bytes;
  plan.max_chunks = config_.max_chunks;
  op->pieces = plan_pieces(s.segments, plan);
  if (!worker_->post([this, op] { start(op); })) {
    *why = "the RDMA backend was removed";
    return false;
  }
  return true;
}

uint64_t RdmaBackend::query_remote_memory(const RemoteEngine& remote, uint32_t mem_id) {
  std::string why;
  bool repeated = false;
  std::shared_ptr<Peer> peer = connect(remote, &why, &repeated);
  if (!peer) throw Error(Code::Connection, why);
  // Asked anew: a session checks what the owner has registered now, not what was cached.
  return remote_memory(peer, mem_id, true)->size;
}

void RdmaBackend::ping(const RemoteEngine& remote) {
  std::string why;
  bool repeated = false;
  std::shared_ptr<Peer> peer = connect(remote, &why, &repeated);
  if (!peer) throw Error(Code::Connection, why);
  try {
    peer->control->request(net::FrameType::Ping, 0, config_.control_timeout_ms);
  } catch (const Error& e) {
    retire(peer, e.what(), true);
    throw;
  }
}

std::string RdmaBackend::connect_info(const std::string& peer_key) {
  if (stopped_.load()) throw Error(Code::NotFound, "engine '" + engine_key_ + "' has no RDMA backend");
  wire::ConnectInfo info;
  {
    std::lock_guard<std::mutex> lock(tokens_mutex_);
    auto it = key_tokens_.find(peer_key);
    if (it == key_tokens_.end()) {
      if (key_tokens_.size() >= kMaxTokens) {
        token_keys_.erase(key_tokens_.begin()->second);
        key_tokens_.erase(key_tokens_.begin());
      }
      wire::Token token{};
      crypto::fill_random(token.data(), token.size());
      token_keys_[token] = peer_key;
      it = key_tokens_.emplace(peer_key, token).first;
    }
    info.token = it->second;
  }
  info.address = worker_->address();
  return wire::encode(info);
}

std::string RdmaBackend::memory_key(uint32_t mem_id) {
  if (stopped_.load()) throw Error(Code::NotFound, "engine '" + engine_key_ + "' has no RDMA backend");
  RegionPin pin = regions_.pin(mem_id);
  if (!pin) {
    throw Error(Code::NotFound, "memory id " + std::to_string(mem_id) + " is not registered with engine '" +
                                    engine_key_ + "'");
  }
  Mapping mapping = mapping_of(pin);
  wire::MemoryKey key;
  key.base = mapping.base;
  key.size = mapping.size;
  key.rkey = mapping.rkey;
  return wire::encode(key);
}

bool RdmaBackend::can_route(const TransferRequest& request) const {
  return request.local->loc != MemoryLocation::GPU || supports_gpu();
}

bool RdmaBackend::submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) {
  Submission submission;
  submission.is_read = request.is_read;
  submission.local = RegionPin(request.local);
  submission.remote = *request.engine;
  submission.remote_id = request.memory->id;
  submission.remote_size = request.memory->size;
  submission.segments = *request.segments;
  submission.uid = request.uid;
  submission.status = request.status;
  submission.fallback = fallback;
  return submit(std::move(submission), why, repeated);
}

void RdmaBackend::forget_remote(const std::string& key, const std::string& reason, bool deregistered) {
  (void)deregistered;
  forget_remote(key, reason);
}

void RdmaBackend::stop(const std::string& reason) {
  (void)reason;
  stop();
}

}  // namespace mori::io::ucx
