// SPDX-License-Identifier: MIT
// The target's side: one listener (loopback unless configured) and one thread per accepted
// connection. A connection is served only after its peer proved the engine's secret; then each
// request frame is checked against its bounds and the registered region it names before a single
// byte of that region is read or written.
// Before that proof a connection counts only against a small limit of its own
// (max_pending_connections) and holds its thread for at most handshake_timeout_ms, so peers without
// the secret can never take the slots (max_connections) of authenticated ones. When the pending
// ones are all taken, a new connection closes the oldest pending one: idle sockets cannot keep a
// peer that answers its handshake at once from getting in. Each connection's
// thread owns it and frees it, slot included, the moment the connection ends.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <unordered_set>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/control.hpp"
#include "core/inbound.hpp"
#include "core/memory.hpp"
#include "net/protocol.hpp"
#include "net/reader.hpp"
#include "net/socket.hpp"

namespace mori::io {

struct ServerConfig {
  std::string key;
  std::string secret;
  std::string host;
  uint16_t port = 0;
  net::TargetLimits limits;
  int64_t handshake_timeout_ms = 2000;  // most time a connection may stay unauthenticated
  int64_t io_timeout_ms = 30000;  // most time a started frame may take to arrive or leave
  size_t max_connections = 1024;        // authenticated connections served at once
  size_t max_pending_connections = 64;  // connections still in their handshake
  net::SocketOptions options;
};

class Server {
 public:
  Server(const ServerConfig& config, RegionTable& regions, InboundTable& inbound);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const { return port_; }
  // Shuts down every connection that is moving bytes of region id right now.
  void abort_users_of(uint32_t region_id);
  // Set while the engine has an RDMA backend; null answers RDMA requests with ERR_NOT_FOUND.
  void set_rdma(std::shared_ptr<RdmaResponder> rdma);
  void stop();

 private:
  static constexpr uint32_t kNoRegion = 0xffffffffu;
  struct Connection {
    net::Socket socket;
    std::unique_ptr<net::StreamReader> reader;  // every read of an authenticated connection
    std::string address;
    std::string peer;
    std::atomic<uint32_t> region{kNoRegion};
    // Under connections_mutex_: which limit the connection counts against, its place in the
    // accept order, and whether a newer connection already pushed it out of the pending ones.
    bool authenticated = false;
    uint64_t accepted = 0;
    bool evicted = false;
  };

  void accept_loop();
  // The body of a connection's thread: handshake, serving, and releasing everything it held.
  void run(std::unique_ptr<Connection> conn);
  // The handshake under handshake_timeout_ms; on success moves the connection from the pending
  // count to the authenticated one, or refuses it when max_connections are served already.
  bool authenticate(Connection& conn);
  // Under connections_mutex_: shuts the oldest unauthenticated connection not yet shut; false when
  // there is none.
  bool evict_oldest_pending(const std::string& newcomer);
  void serve(Connection& conn);
  void serve_data(Connection& conn, const net::FrameHeader& header, std::vector<uint8_t>& table,
                  std::vector<iovec>& iov, std::vector<char>& discard);
  // A write frame's payload into GPU memory through a pinned staging buffer; a CUDA failure
  // becomes ERR_GPU_OP in *code and *message, with the payload still read off the socket.
  void receive_into_gpu(Connection& conn, const net::FrameHeader& header, const Region& region,
                        const std::vector<iovec>& iov, std::vector<char>& discard, net::Deadline deadline,
                        StatusCode* code, std::string* message);
  void serve_query(Connection& conn, const net::FrameHeader& header);
  void serve_rdma(Connection& conn, const net::FrameHeader& header);
  void respond(const Connection& conn, const net::FrameHeader& request, StatusCode code, const std::string& message,
               uint64_t payload_bytes, iovec* payload, size_t payload_count);

  ServerConfig config_;
  RegionTable& regions_;
  InboundTable& inbound_;
  net::Socket listener_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex connections_mutex_;
  std::condition_variable connections_gone_;
  std::unordered_set<Connection*> connections_;  // owned by their threads
  size_t pending_ = 0;
  size_t authenticated_ = 0;
  uint64_t accepted_ = 0;
  std::mutex rdma_mutex_;
  std::shared_ptr<RdmaResponder> rdma_;
};

}  // namespace mori::io
