// SPDX-License-Identifier: MIT
#include "tcp/tcp.hpp"

#include <algorithm>
#include <chrono>
#include <future>

#include "core/take.hpp"

namespace mori::io::tcp {

namespace {

constexpr auto kWatchdogPeriod = std::chrono::milliseconds(20);
const char* const kNoBackend = "No available backend found, create backend first";

}  // namespace

net::SocketOptions data_socket_options(const TcpConfig& config) {
  net::SocketOptions options;
  options.sndbuf = config.sock_sndbuf_bytes;
  options.rcvbuf = config.sock_rcvbuf_bytes;
  options.keepalive = config.enable_keepalive;
  options.keepalive_idle_s = config.keepalive_idle_sec;
  options.keepalive_intvl_s = config.keepalive_intvl_sec;
  options.keepalive_cnt = config.keepalive_cnt;
  return options;
}

net::SocketOptions control_socket_options(const TcpConfig& config) {
  // Small requests and answers: the kernel's buffer sizes, Nagle off unless asked.
  net::SocketOptions options = data_socket_options(config);
  options.sndbuf = 0;
  options.rcvbuf = 0;
  options.nodelay = config.enable_ctrl_nodelay;
  return options;
}

TcpBackend::TcpBackend(const TcpConfig& config, const LinkDefaults& defaults) : defaults_(defaults), config_(config) {
  watchdog_ = std::thread([this] { watchdog_loop(); });
}

TcpBackend::~TcpBackend() { stop("the TCP backend was removed"); }

void TcpBackend::reconfigure(const TcpConfig& config) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  config_ = config;
}

TcpConfig TcpBackend::config() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return config_;
}

int64_t TcpBackend::op_timeout_ms() const { return config().op_timeout_ms; }

bool TcpBackend::can_route(const TransferRequest& request) const {
  (void)request;  // host memory directly, GPU memory through staging buffers
  return true;
}

void TcpBackend::stop(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopped_ = true;
  }
  drop_links(reason);
  {
    std::lock_guard<std::mutex> lock(watch_mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  watch_wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void TcpBackend::abort_users_of(uint32_t id) {
  drop_links("memory id " + std::to_string(id) + " was deregistered while a transfer used it");
}

void TcpBackend::forget_remote(const std::string& key, const std::string& reason, bool deregistered) {
  (void)deregistered;  // a re-registered engine may have moved: reconnect on next use
  const std::shared_ptr<LinkSlot> slot = take_locked(state_mutex_, links_, key);
  if (!slot) return;
  retire(slot, reason);
}

void TcpBackend::drop_links(const std::string& reason) {
  std::map<std::string, std::shared_ptr<LinkSlot>> slots;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    slots.swap(links_);
  }
  for (auto& entry : slots) retire(entry.second, reason);
}

void TcpBackend::retire(const std::shared_ptr<LinkSlot>& slot, const std::string& reason) {
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

void TcpBackend::with_link(const RemoteEngine& remote, LinkWaiter waiter) {
  std::shared_ptr<LinkSlot> slot;
  LinkConfig link;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopped_) throw Error(Code::Unsupported, kNoBackend);
    auto& entry = links_[remote.key];
    if (!entry) entry = std::make_shared<LinkSlot>();
    slot = entry;
    link.local_key = defaults_.local_key;
    link.remote_key = remote.key;
    link.host = remote.host;
    link.port = remote.port;
    link.secret = remote.secret;
    link.lanes = config_.num_data_conns;
    link.connect_timeout_ms = defaults_.connect_timeout_ms;
    link.data_options = data_socket_options(config_);
    link.control_options = control_socket_options(config_);
  }
  std::unique_lock<std::mutex> lock(slot->mutex);
  if (slot->retired) {
    std::string why = "connection to engine '" + remote.key + "' closed: " + slot->retired_reason;
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

void TcpBackend::run_connector(LinkSlot* slot, LinkConfig config, std::thread previous,
                               std::shared_ptr<PeerLink> dead) {
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

std::shared_ptr<PeerLink> TcpBackend::live_link(const std::string& remote_key) {
  std::shared_ptr<LinkSlot> slot;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopped_) return nullptr;
    auto it = links_.find(remote_key);
    if (it == links_.end()) return nullptr;
    slot = it->second;
  }
  std::lock_guard<std::mutex> lock(slot->mutex);
  if (slot->retired || !slot->link || slot->link->dead()) return nullptr;
  return slot->link;
}

std::shared_ptr<PeerLink> TcpBackend::link_to(const RemoteEngine& remote) {
  struct Result {
    std::shared_ptr<PeerLink> link;
    Code code = Code::Internal;
    std::string error;
  };
  auto promise = std::make_shared<std::promise<Result>>();
  std::future<Result> future = promise->get_future();
  with_link(remote, [promise](const std::shared_ptr<PeerLink>& link, Code code, const std::string& error) {
    promise->set_value(Result{link, code, error});
  });
  Result result = future.get();
  if (!result.link) throw Error(result.code, result.error);
  return result.link;
}

uint64_t TcpBackend::query_memory(const RemoteEngine& remote, uint32_t mem_id) {
  return link_to(remote)->query_memory(mem_id, defaults_.connect_timeout_ms);
}

void TcpBackend::ping(const RemoteEngine& remote) { link_to(remote)->ping(defaults_.connect_timeout_ms); }

bool TcpBackend::submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) {
  (void)fallback;
  (void)why;
  *repeated = false;
  const std::shared_ptr<TransferStatus>& status = request.status;
  TcpConfig tcp;
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (stopped_) {
      status->update(StatusCode::ERR_BAD_STATE, kNoBackend);
      return true;
    }
    tcp = config_;
  }
  const bool is_read = request.is_read;
  const uint32_t remote_id = request.memory->id;
  const uint64_t total = request.total;
  const uint64_t uid = request.uid;
  // A live link takes the frames at once: no closure, no copies of the segments.
  if (std::shared_ptr<PeerLink> live = live_link(request.engine->key)) {
    post_frames(live, tcp, status, is_read, request.local, remote_id, *request.segments, total, uid);
    return true;
  }
  // Pinned while the transfer waits for its connection: deregister_memory waits for it too.
  auto pin = std::make_shared<RegionPin>(request.local);
  try {
    with_link(*request.engine, [this, tcp, status, is_read, local = request.local, pin, remote_id,
                                segments = *request.segments, total,
                                uid](const std::shared_ptr<PeerLink>& link, Code, const std::string& error) {
      if (!link) {
        status->update(StatusCode::ERR_BAD_STATE, error);
        return;
      }
      post_frames(link, tcp, status, is_read, local, remote_id, segments, total, uid);
    });
  } catch (const Error& e) {
    status->update(StatusCode::ERR_BAD_STATE, e.what());
  }
  return true;
}

void TcpBackend::post_frames(const std::shared_ptr<PeerLink>& link, const TcpConfig& tcp,
                             const std::shared_ptr<TransferStatus>& status, bool is_read,
                             const std::shared_ptr<Region>& local, uint32_t remote_id,
                             const std::vector<Segment>& segments, uint64_t total, uint64_t uid) {
  // Transfers from striping_threshold up are spread over the lanes, in frames of at least
  // min_stripe_bytes (smaller pieces cost more in per-frame work and thread wake-ups than the
  // parallel lanes gain) and at most the chunk and the target's frame limit.
  const uint64_t lanes = link->lane_count();
  uint64_t spread = total < tcp.striping_threshold_bytes
                        ? total
                        : std::max<uint64_t>(tcp.min_stripe_bytes, (total + lanes - 1) / lanes);
  FramePlan plan;
  plan.frame_bytes = std::max<uint64_t>(1, std::min({spread, tcp.chunk_bytes, link->limits().max_frame_bytes}));
  plan.max_segments = std::min<uint32_t>(defaults_.max_segments, link->limits().max_segments);

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

void TcpBackend::wake_unclaimed_responses() {
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

void TcpBackend::watch(const std::shared_ptr<TransferOp>& op) {
  std::lock_guard<std::mutex> lock(watch_mutex_);
  watched_.push_back(op);
}

void TcpBackend::watchdog_loop() {
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

}  // namespace mori::io::tcp
