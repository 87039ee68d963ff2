// SPDX-License-Identifier: MIT
#include "tcp/peer_link.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "gpu/staging.hpp"

namespace mori::io {

namespace {

net::Socket open_connection(const LinkConfig& config, net::Channel channel, uint8_t lane,
                            const net::SocketOptions& options, net::TargetLimits* limits) {
  net::Socket socket = net::connect_tcp(config.host, config.port, config.connect_timeout_ms);
  net::apply_options(socket, options);
  net::Hello hello;
  hello.channel = channel;
  hello.lane = lane;
  hello.key = config.local_key;
  *limits = net::client_handshake(socket, config.secret, hello, config.remote_key, config.connect_timeout_ms);
  return socket;
}

// How long a response to a transfer sent by its posting thread is left for a thread that waits
// for (or polls) that transfer; after it, the engine's watchdog (wake_unclaimed) has the lane's
// receiver thread read it. Only transfers that nobody looks at pay that thread's wake-up.
constexpr auto kUnclaimedGrace = std::chrono::milliseconds(1);

// Blocks until fd is readable or `deadline` passes (false); a deadline in the past polls once.
bool wait_readable(int fd, net::Deadline deadline) {
  for (;;) {
    int timeout = -1;
    if (deadline != net::never()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - net::Clock::now()).count();
      timeout = static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, timeout);
    if (n > 0) return true;  // readable, or hung up / failed: the read that follows says which
    if (n == 0) return false;
    if (errno != EINTR) throw Error(Code::System, std::string("poll failed: ") + std::strerror(errno));
  }
}

// How long a waiter checks its lane without sleeping before it blocks on it. On the 2-core
// benchmark machine under load, a thread that sleeps may wait a scheduling period once woken:
// 0 left 16-64 KiB writes with a p90 of 36-65 us, 30 us brought it to 18-31 us (the round trip
// is about 18 us), and 100 us did no better while burning more CPU.
constexpr auto kDriveSpin = std::chrono::microseconds(30);

// How long the receiver thread keeps watching its socket after the last response it read.
constexpr int kReceiverLingerMs = 2;

void drain_counter(int fd) {
  uint64_t value;
  while (::read(fd, &value, sizeof(value)) < 0 && errno == EINTR) {
  }
}

}  // namespace

PeerLink::Lane::Lane() : wake_fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (wake_fd < 0) throw Error(Code::System, std::string("cannot create a lane's eventfd: ") + std::strerror(errno));
}

PeerLink::Lane::~Lane() { ::close(wake_fd); }

void PeerLink::Lane::notify_receiver() const {
  uint64_t one = 1;
  while (::write(wake_fd, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

PeerLink::PeerLink(const LinkConfig& config) : config_(config) {
  description_ = "engine '" + config.remote_key + "' at " + config.host + ":" + std::to_string(config.port);
}

std::shared_ptr<PeerLink> PeerLink::open(const LinkConfig& config) {
  std::shared_ptr<PeerLink> link(new PeerLink(config));
  try {
    link->control_ = open_connection(config, net::Channel::Control, 0, config.control_options, &link->limits_);
    for (int i = 0; i < config.lanes; ++i) {
      auto lane = std::make_unique<Lane>();
      net::TargetLimits limits;
      lane->socket = open_connection(config, net::Channel::Data, uint8_t(i), config.data_options, &limits);
      link->lanes_.push_back(std::move(lane));
    }
  } catch (const Error& e) {
    throw Error(e.code(), "cannot connect to " + link->describe() + ": " + e.what());
  }
  for (auto& lane : link->lanes_) {
    Lane* raw = lane.get();
    PeerLink* self = link.get();
    raw->sender = std::thread([self, raw] { self->send_loop(*raw); });
    raw->receiver = std::thread([self, raw] { self->receive_loop(*raw); });
  }
  MORI_IO_LOG(Debug, "connected to " << link->describe() << " with " << config.lanes << " data lanes");
  return link;
}

PeerLink::~PeerLink() {
  fail("the link was closed locally");
  for (auto& lane : lanes_) {
    if (lane->sender.joinable()) lane->sender.join();
    if (lane->receiver.joinable()) lane->receiver.join();
  }
}

void PeerLink::fail(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    if (dead_.load()) return;
    reason_ = reason;
    dead_.store(true);
  }
  MORI_IO_LOG(Info, "link to " << description_ << " failed: " << reason);
  for (auto& lane : lanes_) {
    {
      std::lock_guard<std::mutex> lock(lane->mutex);
      lane->closed = true;
    }
    lane->wake.notify_all();
    lane->notify_receiver();
    lane->socket.shutdown_both();
  }
  control_.shutdown_both();
}

// The calling thread writes one frame of every transfer itself when that frame's lane is idle:
// for a transfer of one frame that saves waking the sender thread, a large part of a small
// transfer's latency; a split transfer's other frames are queued first, so the lanes' sender
// threads send them while the caller sends its own. Frames over kInlineSendBytes (over
// kInlineStripeBytes for a piece of a split write; pieces of split reads never) always go through
// the sender threads, so that posting stays asynchronous: sending its own 1 MiB piece of an 8 MiB
// write made the median 35 % slower than leaving all eight to the senders.
constexpr uint64_t kInlineSendBytes = 1 << 20;
constexpr uint64_t kInlineStripeBytes = 512 << 10;

void PeerLink::submit(const std::vector<std::shared_ptr<Frame>>& frames) {
  const size_t n = lanes_.size();
  size_t start = next_lane_.fetch_add(1, std::memory_order_relaxed);
  thread_local std::vector<iovec> iov;
  for (size_t k = 0; k < frames.size(); ++k) {
    const size_t i = (k + 1) % frames.size();  // frame 0, the one this thread may send, last
    const uint32_t index = static_cast<uint32_t>((start + i) % n);
    Lane& lane = *lanes_[index];
    const std::shared_ptr<Frame>& frame = frames[i];
    const uint64_t outgoing = frame->wire.size() + (frame->is_read() ? 0 : frame->header.payload);
    bool queued = false;
    bool inline_send = false;
    {
      std::lock_guard<std::mutex> lock(lane.mutex);
      if (!lane.closed) {
        // GPU frames never go inline: staging them waits for copies the caller must not wait on.
        // Of a split transfer, only a write's piece: a caller that sent a piece of a split read
        // also read its payload, and 2-16 MiB reads came out slower than with all pieces left to
        // the lanes' threads (alternating runs; writes' pieces up to 512 KiB were not).
        const bool small = frames.size() == 1 ? outgoing <= kInlineSendBytes
                                              : !frame->is_read() && frame->header.payload <= kInlineStripeBytes;
        if (i == 0 && !lane.sending && lane.queue.empty() && small && !frame->on_gpu()) {
          lane.sending = true;
          lane.inflight.push_back(frame);
          inline_send = true;
          if (!lane.receiving) {
            // Left for its waiter to read (drive); the receiver thread takes it only if nobody
            // came for it within the grace (wake_unclaimed).
            lane.claim_after = std::min(lane.claim_after, net::Clock::now() + kUnclaimedGrace);
            frame->op->status->set_driver(weak_from_this(), index);
          }
        } else {
          lane.queue.push_back(frame);
          queued = true;
        }
      }
    }
    if (inline_send) {
      bool ok = send_frame(lane, *frame, iov);
      bool more = false;
      {
        std::lock_guard<std::mutex> lock(lane.mutex);
        lane.sending = false;
        more = !lane.queue.empty();
      }
      if (more) lane.wake.notify_one();
      if (!ok) continue;  // the link failed; the receiver reports the frame
    } else if (queued) {
      lane.wake.notify_one();
    } else {
      std::lock_guard<std::mutex> lock(reason_mutex_);
      frame->complete(StatusCode::ERR_BAD_STATE, "connection to " + description_ + " lost: " + reason_);
    }
  }
}

bool PeerLink::send_frame(Lane& lane, const Frame& frame, std::vector<iovec>& iov) {
  iov.clear();
  iov.push_back(iovec{const_cast<uint8_t*>(frame.wire.data()), frame.wire.size()});
  const bool staged = !frame.is_read() && frame.on_gpu();
  if (!frame.is_read() && !staged) iov.insert(iov.end(), frame.local.begin(), frame.local.end());
  try {
    if (staged) {
      // The GPU bytes go through a pinned buffer: start every piece's copy before the header
      // leaves, so a copy that cannot start never puts a frame on the wire.
      gpu::Stager stager(frame.pin.get()->device, frame.local, frame.header.payload);
      std::string error = stager.start_download();
      if (!error.empty()) throw Error(Code::System, error);
      net::send_iov(lane.socket, iov.data(), iov.size(), net::never(), &dead_);
      stager.send(lane.socket, net::never(), &dead_);
    } else {
      net::send_iov(lane.socket, iov.data(), iov.size(), net::never(), &dead_);
    }
    return true;
  } catch (const Error& e) {
    fail(std::string("sending failed: ") + e.what());
    return false;
  }
}

void PeerLink::send_loop(Lane& lane) {
  std::vector<iovec> iov;
  for (;;) {
    std::shared_ptr<Frame> frame;
    bool notify = false;
    {
      std::unique_lock<std::mutex> lock(lane.mutex);
      lane.wake.wait(lock, [&] { return lane.closed || (!lane.queue.empty() && !lane.sending); });
      if (lane.closed) return;  // the receiver fails what is left
      frame = std::move(lane.queue.front());
      lane.queue.pop_front();
      lane.sending = true;
      // In flight before the first byte leaves, so the response always finds it.
      lane.inflight.push_back(frame);
      lane.claim_after = net::Clock::now();
      notify = !lane.receiving;
    }
    // The receiver thread reads this frame's response: woken while the frame is still going out.
    if (notify) lane.notify_receiver();
    bool ok = send_frame(lane, *frame, iov);
    {
      std::lock_guard<std::mutex> lock(lane.mutex);
      lane.sending = false;
    }
    if (!ok) return;
  }
}

// NOTE [read responses in place]
// A successful read's response is its header and then exactly the frame's payload, and responses
// come in the order of the lane's in-flight frames, so the reader of a lane knows where the next
// payload belongs before it arrives: one receive takes the header into a small array and the
// payload straight into the frame's local memory, where reading through the lane's buffer would
// cost a second receive (and a copy) for any payload over the buffer (NOTE [buffered frame
// reads]). Only for reads into host memory of more than kInPlaceMinBytes (smaller ones fit the
// buffer and come in one receive anyway). When the header turns out to be something else (a
// refusal and its message), the bytes that landed in the frame's memory are moved back to the
// lane's buffer and the response is read the ordinary way; the failed read's destination then
// holds those bytes, as a failed read's destination may hold anything.
constexpr uint64_t kInPlaceMinBytes = 2048;

PeerLink::Received PeerLink::try_receive(Lane& lane, std::shared_ptr<Frame>& frame, std::vector<iovec>& iov) {
  if (lane.reader.buffered() > 0) return Received::Buffered;
  std::shared_ptr<Frame> next;
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    if (!lane.inflight.empty()) next = lane.inflight.front();
  }
  if (!next || !next->is_read() || next->on_gpu() || next->header.payload <= kInPlaceMinBytes) {
    return lane.reader.try_fill() ? Received::Buffered : Received::Nothing;
  }
  uint8_t raw[net::kFrameHeaderBytes];
  iov.assign(next->local.begin(), next->local.end());
  const size_t got = lane.reader.try_receive_split(raw, sizeof(raw), iov.data(), iov.size());
  if (got == 0) return Received::Nothing;
  const size_t landed = got > sizeof(raw) ? got - sizeof(raw) : 0;
  bool expected = false;
  if (got >= sizeof(raw)) {
    const net::FrameHeader header = net::decode_header(raw);
    expected = header.type == net::FrameType::Response && header.uid == next->header.uid &&
               header.seq == next->header.seq && header.nseg == 0 && header.payload == next->header.payload &&
               header.mem_id == static_cast<uint32_t>(StatusCode::SUCCESS);
  }
  if (!expected) {
    thread_local std::vector<uint8_t> back;
    back.assign(raw, raw + std::min(got, sizeof(raw)));
    for (size_t i = 0, left = landed; left > 0; ++i) {
      const size_t k = std::min(left, next->local[i].iov_len);
      const auto* bytes = static_cast<const uint8_t*>(next->local[i].iov_base);
      back.insert(back.end(), bytes, bytes + k);
      left -= k;
    }
    lane.reader.unread(back.data(), back.size());
    return Received::Buffered;
  }
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    frame = std::move(lane.inflight.front());  // `next`: only this lane's reader pops the front
    lane.inflight.pop_front();
    if (lane.inflight.empty()) lane.claim_after = net::never();
  }
  size_t start = 0;
  for (size_t left = landed; left > 0;) {
    const size_t k = std::min(left, iov[start].iov_len);
    iov[start].iov_base = static_cast<uint8_t*>(iov[start].iov_base) + k;
    iov[start].iov_len -= k;
    left -= k;
    if (iov[start].iov_len == 0) ++start;
  }
  if (start < iov.size()) lane.reader.read_iov(iov.data() + start, iov.size() - start, net::never(), &dead_);
  frame->complete(StatusCode::SUCCESS, std::string());
  frame.reset();
  return Received::Completed;
}

void PeerLink::receive_one(Lane& lane, std::shared_ptr<Frame>& frame, std::vector<iovec>& iov,
                           std::string& message) {
  for (;;) {
    const Received got = try_receive(lane, frame, iov);
    if (got == Received::Completed) return;
    if (got == Received::Buffered) break;
    net::wait_ready(lane.socket, POLLIN, net::never(), &dead_);
  }
  uint8_t raw[net::kFrameHeaderBytes];
  lane.reader.read(raw, sizeof(raw), net::never(), &dead_);
  net::FrameHeader header = net::decode_header(raw);
  if (header.type != net::FrameType::Response) throw Error(Code::Protocol, "expected a response frame");
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    if (lane.inflight.empty()) throw Error(Code::Protocol, "a response to no request");
    frame = std::move(lane.inflight.front());
    lane.inflight.pop_front();
    if (lane.inflight.empty()) lane.claim_after = net::never();
  }
  if (header.uid != frame->header.uid || header.seq != frame->header.seq) {
    throw Error(Code::Protocol, "response out of order");
  }
  if (header.nseg > net::kMaxMessageBytes) throw Error(Code::Protocol, "response message too long");
  StatusCode code = net::checked_status(header.mem_id);
  message.assign(header.nseg, '\0');
  lane.reader.read(message.data(), message.size(), net::never(), &dead_);
  if (code == StatusCode::SUCCESS && frame->is_read()) {
    if (header.payload != frame->header.payload) throw Error(Code::Protocol, "read response of the wrong size");
    if (frame->on_gpu()) {
      gpu::Stager stager(frame->pin.get()->device, frame->local, header.payload);
      message = stager.receive(lane.reader, net::never(), &dead_);
      if (!message.empty()) {
        frame->complete(StatusCode::ERR_GPU_OP, "reading from " + description_ + ": " + message);
        frame.reset();
        return;
      }
    } else {
      iov.assign(frame->local.begin(), frame->local.end());
      lane.reader.read_iov(iov.data(), iov.size(), net::never(), &dead_);
    }
  } else if (header.payload != 0) {
    throw Error(Code::Protocol, "unexpected payload in a response");
  }
  frame->complete(code, code == StatusCode::SUCCESS ? std::string() : description_ + " refused: " + message);
  frame.reset();
}

void PeerLink::report_receive_error(std::shared_ptr<Frame>& frame, const Error& e) {
  fail(std::string("receiving failed: ") + e.what());
  if (frame) {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    frame->complete(StatusCode::ERR_BAD_STATE, "connection to " + description_ + " lost: " + reason_);
  }
  frame.reset();
}

bool PeerLink::receive_until_idle(Lane& lane) {
  std::shared_ptr<Frame> frame;
  std::vector<iovec> iov;
  std::string message;
  try {
    for (;;) {
      receive_one(lane, frame, iov, message);
      {
        std::lock_guard<std::mutex> lock(lane.mutex);
        if (!lane.inflight.empty()) continue;
      }
      if (lane.reader.buffered() > 0) continue;  // the start of a response already read
      // Stays on the socket a little while: the next frame the sender thread sends then costs
      // one wake-up (its response), where going back to sleep would cost two (the sender's
      // notification, then the response), each a scheduling turn on a busy machine. Small
      // transfers posted meanwhile are read here too, as before this lane went idle.
      pollfd fds[2] = {{lane.socket.fd(), POLLIN, 0}, {lane.wake_fd, POLLIN, 0}};
      int n = ::poll(fds, 2, kReceiverLingerMs);
      if (n > 0 && (fds[1].revents & POLLIN)) drain_counter(lane.wake_fd);
      std::lock_guard<std::mutex> lock(lane.mutex);
      if (lane.closed || (lane.inflight.empty() && (n <= 0 || !(fds[0].revents & POLLIN)))) {
        lane.receiving = false;
        return true;
      }
      // Frames in flight, or bytes (or a hang-up) on the socket: the next receive_one reads them.
    }
  } catch (const Error& e) {
    report_receive_error(frame, e);
    return false;
  }
}

void PeerLink::receive_until_error(Lane& lane) {
  std::shared_ptr<Frame> frame;
  std::vector<iovec> iov;
  std::string message;
  try {
    for (;;) receive_one(lane, frame, iov, message);
  } catch (const Error& e) {
    report_receive_error(frame, e);
  }
}

void PeerLink::receive_loop(Lane& lane) {
  for (;;) {
    bool claim = false;
    bool watch_socket = false;
    {
      std::lock_guard<std::mutex> lock(lane.mutex);
      if (lane.closed) break;
      if (!lane.receiving && !lane.inflight.empty() && net::Clock::now() >= lane.claim_after) {
        lane.receiving = true;
        claim = true;
      }
      watch_socket = !lane.hangup_seen;
    }
    if (claim) {
      if (!receive_until_idle(lane)) break;
      continue;
    }
    // Asleep until there is work: the socket is watched for a hang-up only (POLLRDHUP), so a
    // response that a waiter reads itself does not wake this thread.
    pollfd fds[2] = {{lane.wake_fd, POLLIN, 0}, {lane.socket.fd(), POLLRDHUP, 0}};
    int n = ::poll(fds, watch_socket ? 2 : 1, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(std::string("waiting for responses failed: ") + std::strerror(errno));
      break;
    }
    if (fds[0].revents & POLLIN) drain_counter(lane.wake_fd);
    if (watch_socket && fds[1].revents != 0) {
      // The peer hung up or the connection broke: read the responses it sent before, then fail.
      bool mine = false;
      {
        std::lock_guard<std::mutex> lock(lane.mutex);
        if (lane.receiving) {
          lane.hangup_seen = true;  // the waiter that receives lets this thread know when it is done
        } else if (!lane.closed) {
          lane.receiving = true;
          mine = true;
        }
      }
      if (mine) {
        receive_until_error(lane);
        break;
      }
    }
  }
  fail_frames(lane);
}

void PeerLink::wake_unclaimed() {
  const auto now = net::Clock::now();
  for (auto& lane : lanes_) {
    bool due = false;
    {
      std::lock_guard<std::mutex> lock(lane->mutex);
      due = !lane->receiving && !lane->inflight.empty() && now >= lane->claim_after;
    }
    if (due) lane->notify_receiver();
  }
}

void PeerLink::drive(uint32_t index, const TransferStatus& status, net::Deadline deadline) {
  if (index >= lanes_.size()) return;
  Lane& lane = *lanes_[index];
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    if (lane.closed || lane.receiving || lane.inflight.empty()) return;
    lane.receiving = true;
  }
  thread_local std::vector<iovec> iov;
  thread_local std::string message;
  std::shared_ptr<Frame> frame;
  bool failed = false;
  try {
    // Until the status is final, or this lane has no frame of it left (a split transfer's other
    // frames are read by their lanes' threads).
    while (!status.is_done()) {
      {
        std::lock_guard<std::mutex> lock(lane.mutex);
        if (std::none_of(lane.inflight.begin(), lane.inflight.end(),
                         [&](const std::shared_ptr<Frame>& f) { return f->op->status.get() == &status; })) {
          break;
        }
      }
      // Checks the socket for up to kDriveSpin without sleeping, yielding the CPU between tries.
      const auto spin_end = std::min(deadline, net::Clock::now() + kDriveSpin);
      Received got = Received::Nothing;
      while ((got = try_receive(lane, frame, iov)) == Received::Nothing && net::Clock::now() < spin_end) sched_yield();
      if (got == Received::Completed) continue;
      if (got == Received::Nothing && !wait_readable(lane.socket.fd(), deadline)) break;
      receive_one(lane, frame, iov, message);
    }
  } catch (const Error& e) {
    report_receive_error(frame, e);
    failed = true;
  }
  bool wake = failed;
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    lane.receiving = false;
    if (!lane.inflight.empty()) {
      // Others' responses follow on this lane: the receiver thread reads them from now on.
      lane.claim_after = net::Clock::now();
      wake = true;
    }
    if (lane.hangup_seen) {
      lane.hangup_seen = false;
      wake = true;
    }
  }
  if (wake) lane.notify_receiver();
}

void PeerLink::fail_frames(Lane& lane) {
  std::deque<std::shared_ptr<Frame>> orphans;
  {
    std::lock_guard<std::mutex> lock(lane.mutex);
    lane.closed = true;
    orphans.swap(lane.inflight);
    for (auto& f : lane.queue) orphans.push_back(std::move(f));
    lane.queue.clear();
  }
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    reason = reason_;
  }
  for (auto& f : orphans) f->complete(StatusCode::ERR_BAD_STATE, "connection to " + description_ + " lost: " + reason);
}

net::ControlAnswer PeerLink::control(net::FrameType type, uint32_t mem_id, int64_t timeout_ms) {
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (dead_.load()) throw Error(Code::Connection, "connection to " + description_ + " is closed");
  try {
    return net::control_round_trip(control_, type, mem_id, kMaxControlPayload, net::after_ms(timeout_ms), &dead_);
  } catch (const Error& e) {
    fail(std::string("control request failed: ") + e.what());
    throw Error(e.code(), "control request to " + description_ + " failed: " + e.what());
  }
}

uint64_t PeerLink::query_memory(uint32_t mem_id, int64_t timeout_ms) {
  const net::ControlAnswer answer = control(net::FrameType::MemQuery, mem_id, timeout_ms);
  if (answer.code != StatusCode::SUCCESS) throw Error(Code::NotFound, description_ + ": " + answer.message);
  if (answer.payload.size() != 8) throw Error(Code::Protocol, "memory query answer of the wrong size");
  return net::get_u64(reinterpret_cast<const uint8_t*>(answer.payload.data()));
}

void PeerLink::ping(int64_t timeout_ms) {
  control(net::FrameType::Ping, 0, timeout_ms);
}

}  // namespace mori::io
