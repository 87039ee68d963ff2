// SPDX-License-Identifier: MIT
// The initiator's side of the connections to one remote engine: a control connection (memory
// queries, liveness pings) and `lanes` data connections. Each lane has a sender thread that
// writes queued frames (header, segment table and, for writes, the payload gathered straight
// from registered memory) and a receiver thread that reads the responses in order, scattering
// read data straight into registered memory.
//
// A small transfer that finds its lane idle skips both threads: the posting thread writes it
// (submit), and the thread that waits for it reads the response itself (drive), blocking on the
// socket as a plain request/response client would, so no other thread is woken on its way. The
// lane's receiver thread sleeps meanwhile, watching only for the peer hanging up, and reads such
// a response when nobody came for it within a millisecond (the engine's watchdog checks, every
// 20 ms, through wake_unclaimed).
//
// Any error on any connection fails the whole link: its sockets are shut down, every queued or in-flight frame reports ERR_BAD_STATE with the
// first reason, and the engine opens a fresh link for the next transfer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/status.hpp"
#include "tcp/frames.hpp"
#include "net/protocol.hpp"
#include "net/reader.hpp"
#include "net/socket.hpp"

namespace mori::io {

struct LinkConfig {
  std::string local_key;
  std::string remote_key;
  std::string host;
  uint16_t port = 0;
  std::string secret;  // the remote engine's, from its EngineDesc
  int lanes = 1;
  int64_t connect_timeout_ms = 5000;
  net::SocketOptions data_options;
  net::SocketOptions control_options;
};

class PeerLink : public StatusDriver, public std::enable_shared_from_this<PeerLink> {
 public:
  // Connects and authenticates every connection; throws Error on failure.
  static std::shared_ptr<PeerLink> open(const LinkConfig& config);
  ~PeerLink() override;
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  // Queues frames round-robin over the lanes, starting at a lane that rotates per call.
  void submit(const std::vector<std::shared_ptr<Frame>>& frames);
  // Idempotent; the first reason is the one frames report.
  void fail(const std::string& reason);
  bool dead() const { return dead_.load(); }
  size_t lane_count() const { return lanes_.size(); }
  const net::TargetLimits& limits() const { return limits_; }
  const std::string& describe() const { return description_; }

  // Reads responses on `lane` from the calling thread until `status` is final or `deadline`
  // passes, unless another thread is receiving there already (StatusDriver).
  void drive(uint32_t lane, const TransferStatus& status, net::Deadline deadline) override;
  // Has the receiver threads read the responses that nobody waiting or polling read in time.
  void wake_unclaimed();

  // Control requests. query_memory returns the size of the remote's registered memory id, or
  // throws Error(NotFound); both throw Error(Connection/Timeout) when the peer does not answer.
  uint64_t query_memory(uint32_t mem_id, int64_t timeout_ms);
  void ping(int64_t timeout_ms);

 private:
  struct Lane {
    net::Socket socket;
    net::StreamReader reader{socket};  // read by whoever holds `receiving`: NOTE [buffered frame reads]
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::shared_ptr<Frame>> queue;
    std::deque<std::shared_ptr<Frame>> inflight;
    bool closed = false;
    bool sending = false;  // one writer per socket: the sender thread or a caller sending inline
    bool receiving = false;  // one reader per socket: the receiver thread or a waiter (drive)
    // When the receiver thread takes in-flight frames that no waiter is reading (never while the
    // lane has none in flight); a frame sent by the sender thread makes it "now".
    net::Deadline claim_after = net::never();
    bool hangup_seen = false;  // the peer hung up while a waiter was receiving
    // eventfd waking the receiver thread: frames for it to read, a waiter done, the link failed
    int wake_fd = -1;
    std::thread sender;
    std::thread receiver;

    Lane();
    ~Lane();
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;
    void notify_receiver() const;
  };

  explicit PeerLink(const LinkConfig& config);
  void send_loop(Lane& lane);
  // Writes one frame to the lane's socket; on error fails the link and returns false.
  bool send_frame(Lane& lane, const Frame& frame, std::vector<iovec>& iov);
  void receive_loop(Lane& lane);
  enum class Received { Nothing, Buffered, Completed };
  // One attempt that does not wait: the lane's next response received in place (Completed, NOTE
  // [read responses in place]), or bytes of it buffered in the lane's reader, or nothing there.
  Received try_receive(Lane& lane, std::shared_ptr<Frame>& frame, std::vector<iovec>& iov);
  // Reads one response and completes its frame (kept in `frame` while it is read, so an error can
  // report it); throws Error on a broken connection or protocol.
  void receive_one(Lane& lane, std::shared_ptr<Frame>& frame, std::vector<iovec>& iov, std::string& message);
  // The receiver thread's reading: until no frame is in flight (returns true, the lane released)
  // or until the connection fails (returns false, the link failed).
  bool receive_until_idle(Lane& lane);
  // After a hang-up: the responses that came before it, then the failure.
  void receive_until_error(Lane& lane);
  void report_receive_error(std::shared_ptr<Frame>& frame, const Error& e);
  void fail_frames(Lane& lane);
  // One control round trip (a memory query's answer is 8 bytes, a ping's none).
  static constexpr uint64_t kMaxControlPayload = 64;
  net::ControlAnswer control(net::FrameType type, uint32_t mem_id, int64_t timeout_ms);

  LinkConfig config_;
  std::string description_;
  net::TargetLimits limits_;
  net::Socket control_;
  std::mutex control_mutex_;
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<bool> dead_{false};
  std::mutex reason_mutex_;
  std::string reason_;
  std::atomic<uint32_t> next_lane_{0};
};

}  // namespace mori::io
