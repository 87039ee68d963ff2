// SPDX-License-Identifier: MIT
// The RDMA backend's worker-thread side: endpoints, rkeys, the state machine of each transfer
// (post -> flush -> notify -> done), completion callbacks, deadlines and teardown. Everything
// here runs on the worker thread, inside or between ucp_worker_progress calls; UCX callbacks only
// count and schedule, and the transfers advance after progress returns, so no UCX call is made
// from inside another.
#include <algorithm>

#include "core/error.hpp"
#include "core/log.hpp"
#include "gpu/device.hpp"
#include "rdma/rdma.hpp"
#include "ucx/loader.hpp"

namespace mori::io::ucx {

namespace {

// Operations one transfer keeps in flight at once, in units of post_batch.
constexpr int kInflightBatches = 4;
constexpr auto kDeadlineCheck = std::chrono::milliseconds(10);

const char* verb(const Op& op) { return op.is_read ? "RDMA read from " : "RDMA write to "; }

// UCX calls the callbacks below from C code: nothing may unwind through it.
template <typename Fn>
void guarded(const char* what, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    MORI_IO_LOG(Error, "UCX " << what << " callback failed: " << e.what());
  } catch (...) {
    MORI_IO_LOG(Error, "UCX " << what << " callback failed");
  }
}

// An active message whose header does not decode comes from a broken or hostile peer: it is
// dropped with a warning naming the engine, instead of failing the callback.
template <typename Message>
bool decode_or_drop(Message (*decode)(const void*, size_t), const void* header, size_t length,
                    const std::string& engine_key, const char* what, Message* out) {
  try {
    *out = decode(header, length);
    return true;
  } catch (const Error& e) {
    MORI_IO_LOG(Warning, "engine '" << engine_key << "' dropped an RDMA " << what << ": " << e.what());
    return false;
  }
}

}  // namespace

struct RdmaBackend::AckSend {
  RdmaBackend* owner;
  uint8_t bytes[wire::kAckBytes];
};

void RdmaBackend::on_start(ucp_worker_h worker) {
  handle_ = worker;
  const Api& api = context_.api();
  ucp_am_handler_param_t param{};
  param.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  param.arg = this;
  param.id = wire::kNotifyId;
  param.cb = &RdmaBackend::on_notify;
  context_.check(api.ucp_worker_set_am_recv_handler(worker, &param), "ucp_worker_set_am_recv_handler");
  param.id = wire::kAckId;
  param.cb = &RdmaBackend::on_ack;
  context_.check(api.ucp_worker_set_am_recv_handler(worker, &param), "ucp_worker_set_am_recv_handler");
}

RdmaBackend::Mapping RdmaBackend::map_on_worker(uint32_t id, uintptr_t base, uint64_t size, int device) {
  auto it = mappings_.find(id);
  if (it != mappings_.end()) return it->second;
  if (stopping_) throw Error(Code::Unsupported, "the RDMA backend was removed");
  Mapping mapping;
  mapping.base = base;
  mapping.size = size;
  if (size > 0) {
    // UCX's CUDA transports work in the calling thread's current context: this thread is
    // mori-io's own, so binding the device's primary context (torch's) here disturbs nobody.
    if (device >= 0) gpu::bind(device);
    mapping.memh = context_.map(base, size, device >= 0);
    try {
      mapping.rkey = context_.pack_rkey(mapping.memh);
      if (mapping.rkey.size() > wire::kMaxRkeyBytes) {
        throw Error(Code::Unsupported, "UCX packed an rkey of " + std::to_string(mapping.rkey.size()) +
                                           " bytes (limit " + std::to_string(wire::kMaxRkeyBytes) + ")");
      }
    } catch (...) {
      context_.unmap(mapping.memh);
      throw;
    }
  }
  mappings_.emplace(id, mapping);
  return mapping;
}

void RdmaBackend::create_endpoints(const std::shared_ptr<Peer>& peer, const std::string& address) {
  if (stopping_) throw Error(Code::Unsupported, "the RDMA backend was removed");
  peers_.push_back(peer);  // from here teardown closes whatever was made
  const Api& api = context_.api();
  for (int lane = 0; lane < config_.lanes; ++lane) {
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_NAME;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    // PEER: a dead peer fails the endpoint and its requests instead of hanging them.
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &RdmaBackend::on_ep_error;
    params.err_handler.arg = peer.get();
    params.name = "mori-io";
    ucp_ep_h ep = nullptr;
    ucs_status_t status = api.ucp_ep_create(handle_, &params, &ep);
    if (status != UCS_OK) {
      throw Error(Code::Connection, "ucp_ep_create to " + peer->description + " failed: " + describe(api, status));
    }
    peer->eps.push_back(ep);
  }
}

void RdmaBackend::unpack_rkeys(Peer& peer, RemoteRegion& memory, const std::string& packed) {
  if (peer.torn_down) throw Error(Code::Connection, "the RDMA connection to " + peer.description + " was closed");
  const Api& api = context_.api();
  for (ucp_ep_h ep : peer.eps) {
    ucp_rkey_h rkey = nullptr;
    ucs_status_t status = api.ucp_ep_rkey_unpack(ep, packed.data(), &rkey);
    if (status != UCS_OK) {
      for (ucp_rkey_h made : memory.rkeys) api.ucp_rkey_destroy(made);
      memory.rkeys.clear();
      throw Error(Code::Protocol, "the rkey of memory id " + std::to_string(memory.id) + " from " + peer.description +
                                      " does not unpack: " + describe(api, status));
    }
    memory.rkeys.push_back(rkey);
  }
}

void RdmaBackend::start(const std::shared_ptr<Op>& op) {
  ops_[op->seq] = op;
  if (op->peer->torn_down) op->fail(StatusCode::ERR_RDMA_OP, "the RDMA connection to " + op->peer->description +
                                                                 " closed before the transfer started", true);
  schedule(*op);
}

void RdmaBackend::schedule(Op& op) {
  if (op.scheduled) return;
  op.scheduled = true;
  ready_.push_back(&op);
}

ucp_request_param_t RdmaBackend::op_param(Op& op) const {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &RdmaBackend::on_request_done;
  param.user_data = &op;
  return param;
}

// Counts a request UCX took as outstanding (its callback ends it); one UCX refused at once fails
// the op with `failure` and UCX's reason, and gives false. A null request completed in place.
bool RdmaBackend::track(Op& op, ucs_status_ptr_t request, const char* failure) {
  if (ptr_is_request(request)) {
    ++op.outstanding;
    ++op.peer->inflight;
  } else if (request != nullptr) {
    op.fail(StatusCode::ERR_RDMA_OP,
            verb(op) + op.peer->description + failure + describe(context_.api(), ptr_status(request)), true);
    return false;
  }
  return true;
}

void RdmaBackend::post_pieces(Op& op) {
  const Api& api = context_.api();
  const int cap = config_.post_batch * kInflightBatches;
  int posted = 0;
  if (op.device >= 0 && op.next < op.pieces.size()) {
    try {
      gpu::bind(op.device);
    } catch (const Error& e) {
      op.fail(StatusCode::ERR_GPU_OP, e.what(), true);
      return;
    }
  }
  while (op.next < op.pieces.size() && posted < config_.post_batch && op.outstanding < cap) {
    const Piece& piece = op.pieces[op.next];
    ucp_request_param_t param = op_param(op);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    param.memory_type = op.device >= 0 ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
    if (op.memh != nullptr) {
      param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      param.memh = op.memh;
    }
    void* local = reinterpret_cast<void*>(op.local_base + piece.local_offset);
    const uint64_t remote = op.remote->base + piece.remote_offset;
    ucp_ep_h ep = op.peer->eps[piece.lane];
    ucp_rkey_h rkey = op.remote->rkeys[piece.lane];
    ucs_status_ptr_t request = op.is_read ? api.ucp_get_nbx(ep, local, piece.size, remote, rkey, &param)
                                          : api.ucp_put_nbx(ep, local, piece.size, remote, rkey, &param);
    ++op.next;
    ++posted;
    if (!op.is_read) op.lanes_used |= uint64_t(1) << piece.lane;
    if (!track(op, request, " failed to start: ")) return;
  }
  if (op.next < op.pieces.size() && op.outstanding < cap) schedule(op);
}

void RdmaBackend::start_flush(Op& op) {
  const Api& api = context_.api();
  for (int lane = 0; lane < config_.lanes; ++lane) {
    if ((op.lanes_used & (uint64_t(1) << lane)) == 0) continue;
    ucp_request_param_t param = op_param(op);
    if (!track(op, api.ucp_ep_flush_nbx(op.peer->eps[lane], &param), ": flush failed: ")) return;
  }
}

void RdmaBackend::start_notify(Op& op) {
  const Api& api = context_.api();
  wire::Notify notify;
  notify.token = op.peer->token;
  notify.uid = op.uid;
  notify.seq = op.seq;
  wire::encode(notify, op.notify);
  ucp_request_param_t param = op_param(op);
  param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  // REPLY: the target answers on the endpoint this arrives by, without knowing our address.
  param.flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER;
  ucs_status_ptr_t request =
      api.ucp_am_send_nbx(op.peer->eps[0], wire::kNotifyId, op.notify, wire::kNotifyBytes, nullptr, 0, &param);
  if (track(op, request, ": notification failed: ")) op.ack_pending = true;
}

void RdmaBackend::advance(Op& op) {
  for (;;) {
    if (op.error != StatusCode::SUCCESS) {
      if (op.outstanding == 0) finish(op);
      return;
    }
    switch (op.stage) {
      case Stage::Post:
        post_pieces(op);
        if (op.error != StatusCode::SUCCESS) continue;
        if (op.next < op.pieces.size() || op.outstanding > 0) return;
        // A write is complete at the target only once flushed; a read's data is here already.
        op.stage = op.lanes_used != 0 ? Stage::Flush : Stage::Notify;
        op.stage_started = false;
        continue;
      case Stage::Flush:
        if (!op.stage_started) {
          op.stage_started = true;
          start_flush(op);
          continue;
        }
        if (op.outstanding > 0) return;
        op.stage = Stage::Notify;
        op.stage_started = false;
        continue;
      case Stage::Notify:
        if (!config_.notify) {
          op.stage = Stage::Done;
          continue;
        }
        if (!op.stage_started) {
          op.stage_started = true;
          start_notify(op);
          continue;
        }
        if (op.outstanding > 0 || op.ack_pending) return;
        op.stage = Stage::Done;
        continue;
      case Stage::Done:
        finish(op);
        return;
    }
  }
}

void RdmaBackend::finish(Op& op) {
  auto it = ops_.find(op.seq);
  if (it == ops_.end()) return;
  std::shared_ptr<Op> keep = std::move(it->second);  // op stays valid to the end of this function
  ops_.erase(it);
  if (op.error == StatusCode::SUCCESS) {
    op.status->update(StatusCode::SUCCESS, "");
  } else if (op.may_fall_back && op.fallback && !stopping_) {
    // Every UCX request of the transfer is done: the retry never races a late RDMA write.
    runner_.post([fallback = std::move(op.fallback), reason = op.message] { fallback(reason); });
  } else {
    op.status->update(op.error, op.message);
  }
}

void RdmaBackend::request_done(Op& op, ucs_status_t status) {
  --op.outstanding;
  --op.peer->inflight;
  if (status != UCS_OK) {
    op.fail(StatusCode::ERR_RDMA_OP, verb(op) + op.peer->description + " failed: " + describe(context_.api(), status),
            true);
  }
  schedule(op);
}

void RdmaBackend::teardown(const std::shared_ptr<Peer>& peer, const std::string& reason, bool fall_back) {
  if (peer->torn_down) return;
  peer->torn_down = true;
  peer->dead.store(true);
  const std::string why = "the RDMA connection to " + peer->description + " closed: " + reason;
  for (auto& entry : ops_) {
    Op& op = *entry.second;
    if (op.peer != peer) continue;
    op.fail(StatusCode::ERR_RDMA_OP, why, fall_back);
    op.ack_pending = false;
    schedule(op);
  }
  // FORCE: cancels what is in flight at once (those callbacks fail their transfers) rather than
  // waiting for a peer that may never answer.
  const Api& api = context_.api();
  for (ucp_ep_h ep : peer->eps) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    param.cb.send = &RdmaBackend::on_close_done;
    param.user_data = peer.get();
    ucs_status_ptr_t request = api.ucp_ep_close_nbx(ep, &param);
    if (ptr_is_request(request)) ++peer->closing;
  }
  peer->eps.clear();
  MORI_IO_LOG(Debug, why);
}

void RdmaBackend::reap_peers() {
  const Api& api = context_.api();
  for (auto it = peers_.begin(); it != peers_.end();) {
    Peer& peer = **it;
    if (!peer.torn_down) {
      ++it;
      continue;
    }
    // The rkeys go once no request may use them (after the endpoints, which UCX tolerates).
    if (!peer.rkeys_destroyed && peer.inflight == 0) {
      std::lock_guard<std::mutex> lock(peer.memories_mutex);
      auto destroy = [&api](RemoteRegion& memory) {
        for (ucp_rkey_h rkey : memory.rkeys) api.ucp_rkey_destroy(rkey);
        memory.rkeys.clear();
      };
      for (auto& entry : peer.memories) destroy(*entry.second);
      for (auto& memory : peer.retired) destroy(*memory);
      peer.rkeys_destroyed = true;
    }
    if (peer.rkeys_destroyed && peer.closing == 0) {
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
}

void RdmaBackend::check_deadlines() {
  const auto now = net::Clock::now();
  if (ops_.empty() || now < next_deadline_check_) return;
  next_deadline_check_ = now + kDeadlineCheck;
  std::vector<std::shared_ptr<Op>> expired;
  for (auto& entry : ops_) {
    Op& op = *entry.second;
    if (!op.timed_out && op.error == StatusCode::SUCCESS && now >= op.deadline) expired.push_back(entry.second);
  }
  for (auto& op : expired) {
    op->timed_out = true;
    const std::string why = "transfer " + std::to_string(op->uid) + " got no answer within op_timeout_ms=" +
                            std::to_string(op->timeout_ms);
    op->fail(StatusCode::ERR_RDMA_OP, verb(*op) + op->peer->description + ": " + why, false);
    teardown(op->peer, why, false);
    schedule(*op);
  }
}

RdmaBackend::Tick RdmaBackend::on_tick() {
  if (!failed_.empty()) {
    auto failed = std::move(failed_);
    failed_.clear();
    for (auto& [raw, reason] : failed) {
      for (auto& peer : peers_) {
        if (peer.get() == raw) {
          teardown(peer, reason, true);
          break;
        }
      }
    }
  }
  check_deadlines();
  while (!ready_.empty()) {
    std::vector<Op*> batch;
    batch.swap(ready_);
    for (Op* op : batch) {
      op->scheduled = false;
      advance(*op);
    }
    // Ops that only wait for the next pass to post more go on then, after progress.
    bool again = false;
    for (Op* op : ready_) again = again || op->error != StatusCode::SUCCESS || op->stage != Stage::Post;
    if (!again) break;
  }
  reap_peers();
  if (stopping_ && ops_.empty() && !mappings_.empty()) {
    for (auto& entry : mappings_) {
      if (entry.second.memh != nullptr) context_.unmap(entry.second.memh);
    }
    mappings_.clear();
  }
  Tick tick;
  tick.busy = !ops_.empty() || !ready_.empty() || acks_in_flight_ > 0 || !failed_.empty() ||
              std::any_of(peers_.begin(), peers_.end(), [](const auto& p) { return p->torn_down; }) ||
              (stopping_ && !mappings_.empty());
  tick.ready = !ready_.empty() || !failed_.empty();
  if (!ops_.empty()) tick.wake = next_deadline_check_;
  return tick;
}

void RdmaBackend::on_stop() {
  stopping_ = true;
  auto peers = peers_;
  for (auto& peer : peers) teardown(peer, "the RDMA backend was removed", false);
}

void RdmaBackend::ep_failed(Peer* peer, ucs_status_t status) {
  peer->dead.store(true);
  failed_.emplace_back(peer, "UCX reported the endpoint failed: " + describe(context_.api(), status));
}

void RdmaBackend::handle_notify(const void* header, size_t length, const ucp_am_recv_param_t* param) {
  wire::Notify notify;
  if (!decode_or_drop(wire::decode_notify, header, length, engine_key_, "notification", &notify)) return;
  std::string key;
  {
    std::lock_guard<std::mutex> lock(tokens_mutex_);
    auto it = token_keys_.find(notify.token);
    if (it != token_keys_.end()) key = it->second;
  }
  StatusCode code = StatusCode::SUCCESS;
  if (key.empty()) {
    code = StatusCode::ERR_NOT_FOUND;
    MORI_IO_LOG(Warning, "engine '" << engine_key_ << "' got an RDMA notification (uid " << notify.uid
                                    << ") with a token it never issued; not recorded");
  } else {
    inbound_.record(key, notify.uid, 1, StatusCode::SUCCESS, "");
  }
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) == 0 || param->reply_ep == nullptr) return;
  auto* ack = new AckSend{this, {}};
  wire::encode(wire::Ack{static_cast<uint16_t>(code), notify.seq}, ack->bytes);
  ucp_request_param_t send{};
  send.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  send.cb.send = &RdmaBackend::on_ack_sent;
  send.user_data = ack;
  send.flags = UCP_AM_SEND_FLAG_EAGER;
  // Sending from inside the receive callback is allowed (only progressing is not), and the
  // reply endpoint is certainly valid here.
  ucs_status_ptr_t request =
      context_.api().ucp_am_send_nbx(param->reply_ep, wire::kAckId, ack->bytes, wire::kAckBytes, nullptr, 0, &send);
  if (ptr_is_request(request)) {
    ++acks_in_flight_;
    return;
  }
  if (request != nullptr) {
    MORI_IO_LOG(Info, "engine '" << engine_key_ << "' could not acknowledge an RDMA notification: "
                                 << describe(context_.api(), ptr_status(request)));
  }
  delete ack;
}

void RdmaBackend::handle_ack(const void* header, size_t length) {
  wire::Ack ack;
  if (!decode_or_drop(wire::decode_ack, header, length, engine_key_, "acknowledgement", &ack)) return;
  auto it = ops_.find(ack.seq);
  if (it == ops_.end() || !it->second->ack_pending) return;  // late: the transfer already ended
  Op& op = *it->second;
  op.ack_pending = false;
  if (ack.code != static_cast<uint16_t>(StatusCode::SUCCESS)) {
    op.fail(StatusCode::ERR_RDMA_OP,
            op.peer->description + " did not record the transfer (it does not know this engine's token: its RDMA "
                                   "backend was re-created?)",
            true);
  }
  schedule(op);
}

void RdmaBackend::on_request_done(void* request, ucs_status_t status, void* user_data) {
  auto* op = static_cast<Op*>(user_data);
  auto* self = static_cast<RdmaBackend*>(op->owner);
  guarded("completion", [&] { self->request_done(*op, status); });
  self->context_.api().ucp_request_free(request);
}

void RdmaBackend::on_close_done(void* request, ucs_status_t, void* user_data) {
  auto* peer = static_cast<Peer*>(user_data);
  auto* self = static_cast<RdmaBackend*>(peer->owner);
  --peer->closing;
  self->context_.api().ucp_request_free(request);
}

void RdmaBackend::on_ack_sent(void* request, ucs_status_t, void* user_data) {
  auto* ack = static_cast<AckSend*>(user_data);
  RdmaBackend* self = ack->owner;
  --self->acks_in_flight_;
  delete ack;
  self->context_.api().ucp_request_free(request);
}

void RdmaBackend::on_ep_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  guarded("endpoint error", [&] { static_cast<RdmaBackend*>(peer->owner)->ep_failed(peer, status); });
}

ucs_status_t RdmaBackend::on_notify(void* arg, const void* header, size_t header_length, void*, size_t,
                                    const ucp_am_recv_param_t* param) {
  guarded("notification", [&] { static_cast<RdmaBackend*>(arg)->handle_notify(header, header_length, param); });
  return UCS_OK;
}

ucs_status_t RdmaBackend::on_ack(void* arg, const void* header, size_t header_length, void*, size_t,
                                 const ucp_am_recv_param_t*) {
  guarded("acknowledgement", [&] { static_cast<RdmaBackend*>(arg)->handle_ack(header, header_length); });
  return UCS_OK;
}

}  // namespace mori::io::ucx
