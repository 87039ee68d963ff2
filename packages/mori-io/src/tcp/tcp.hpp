// SPDX-License-Identifier: MIT
// The TCP backend (MORI's BackendType.TCP): one peer link per remote engine (tcp/peer_link.hpp),
// opened on first use by a connector thread so that no caller waits on a peer, transfers cut into
// frames over the link's lanes (tcp/frames.hpp), and a watchdog that fails the link of a transfer
// whose peer stays silent past op_timeout_ms. It takes every pair (GPU memory travels through
// pinned staging buffers) and is the last backend of the engine's route chain. The target's side
// of the protocol is the engine's server (tcp/server.hpp).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/remote.hpp"
#include "net/socket.hpp"
#include "tcp/frames.hpp"
#include "tcp/peer_link.hpp"

namespace mori::io::tcp {

// MORI's TcpBackendConfig, field for field (mori.io.config.TcpBackendConfig fills it by name).
struct TcpConfig {
  int num_data_conns = 8;
  uint64_t striping_threshold_bytes = 65536;
  uint64_t min_stripe_bytes = 512 * 1024;
  uint64_t chunk_bytes = 4ull << 20;
  int64_t op_timeout_ms = 30000;
  int sock_sndbuf_bytes = 32 * 1024 * 1024;  // data connections only: 0 leaves the kernel's autotuning
  int sock_rcvbuf_bytes = 32 * 1024 * 1024;
  bool enable_keepalive = true;
  int keepalive_idle_sec = 30;
  int keepalive_intvl_sec = 10;
  int keepalive_cnt = 3;
  bool enable_ctrl_nodelay = true;
};

// The socket options of a link's data connections and of its control connection.
net::SocketOptions data_socket_options(const TcpConfig& config);
net::SocketOptions control_socket_options(const TcpConfig& config);

// What the backend takes from the engine's own configuration.
struct LinkDefaults {
  std::string local_key;
  int64_t connect_timeout_ms = 5000;
  uint32_t max_segments = 8192;  // most segments this engine puts in one frame
};

class TcpBackend : public Backend {
 public:
  TcpBackend(const TcpConfig& config, const LinkDefaults& defaults);
  ~TcpBackend() override;
  TcpBackend(const TcpBackend&) = delete;
  TcpBackend& operator=(const TcpBackend&) = delete;

  // Creating the backend again only changes its settings: open links and transfers carry on.
  void reconfigure(const TcpConfig& config);
  TcpConfig config() const;

  BackendType type() const override { return BackendType::TCP; }
  bool can_route(const TransferRequest& request) const override;
  // Never fails over and always returns true: a missing or lost connection, or a stopped backend,
  // finishes the status with ERR_BAD_STATE.
  bool submit(const TransferRequest& request, Fallback& fallback, std::string* why, bool* repeated) override;
  int64_t op_timeout_ms() const override;
  // Drops every link: the transfers on them fail, the next ones connect anew.
  void abort_users_of(uint32_t id) override;
  void forget_remote(const std::string& key, const std::string& reason, bool deregistered) override;
  void stop(const std::string& reason) override;

  // Control requests, synchronous as in MORI; throw Error.
  uint64_t query_memory(const RemoteEngine& remote, uint32_t mem_id);
  void ping(const RemoteEngine& remote);

 private:
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

  // Calls `waiter` with the link to the remote: at once when a live link exists, else from a
  // connector thread once connecting succeeded or failed (within connect_timeout_ms), so that no
  // caller's thread ever waits on a peer. Throws Error(Unsupported) once stopped.
  void with_link(const RemoteEngine& remote, LinkWaiter waiter);
  static void run_connector(LinkSlot* slot, LinkConfig config, std::thread previous, std::shared_ptr<PeerLink> dead);
  // Fails the slot's link, lets its waiters fail and joins its connector.
  static void retire(const std::shared_ptr<LinkSlot>& slot, const std::string& reason);
  // The live link to remote_key, or null when there is none yet (or it died): with_link's fast path.
  std::shared_ptr<PeerLink> live_link(const std::string& remote_key);
  // with_link, waited for: for control requests.
  std::shared_ptr<PeerLink> link_to(const RemoteEngine& remote);
  void drop_links(const std::string& reason);
  // Cuts the transfer into frames sized for `link` and queues them on it.
  void post_frames(const std::shared_ptr<PeerLink>& link, const TcpConfig& tcp,
                   const std::shared_ptr<TransferStatus>& status, bool is_read, const std::shared_ptr<Region>& local,
                   uint32_t remote_id, const std::vector<Segment>& segments, uint64_t total, uint64_t uid);
  void watch(const std::shared_ptr<TransferOp>& op);
  void watchdog_loop();
  // Small transfers' responses that neither a waiter nor a poller read within a millisecond are
  // read by their lanes' receiver threads (PeerLink::wake_unclaimed), checked every watchdog period.
  void wake_unclaimed_responses();

  const LinkDefaults defaults_;
  mutable std::mutex state_mutex_;  // config_, links_, stopped_
  TcpConfig config_;
  std::map<std::string, std::shared_ptr<LinkSlot>> links_;
  bool stopped_ = false;

  std::mutex watch_mutex_;
  std::condition_variable watch_wake_;
  std::vector<std::shared_ptr<TransferOp>> watched_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace mori::io::tcp
