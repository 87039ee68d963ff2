// SPDX-License-Identifier: MIT
#include "tcp/server.hpp"

#include <algorithm>
#include <system_error>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "gpu/staging.hpp"

namespace mori::io {

namespace {

constexpr size_t kDiscardBytes = 64 * 1024;

// Reads and throws away len bytes of a request the target refused, keeping the stream in step.
void drain(net::StreamReader& reader, uint64_t len, std::vector<char>& scratch, net::Deadline deadline,
           const std::atomic<bool>* stop) {
  while (len > 0) {
    size_t take = size_t(std::min<uint64_t>(len, scratch.size()));
    reader.read(scratch.data(), take, deadline, stop);
    len -= take;
  }
}

}  // namespace

Server::Server(const ServerConfig& config, RegionTable& regions, InboundTable& inbound)
    : config_(config), regions_(regions), inbound_(inbound) {
  if (config_.max_pending_connections == 0) config_.max_pending_connections = 1;
  listener_ = net::listen_tcp(config.host, config.port, 128, &port_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

Server::~Server() { stop(); }

void Server::stop() {
  if (stop_.exchange(true)) return;
  listener_.shutdown_both();
  if (acceptor_.joinable()) acceptor_.join();
  std::unique_lock<std::mutex> lock(connections_mutex_);
  for (Connection* conn : connections_) conn->socket.shutdown_both();
  // Each thread sees its socket shut (or stop_) within one poll slice and frees its connection.
  connections_gone_.wait(lock, [&] { return connections_.empty(); });
}

void Server::abort_users_of(uint32_t region_id) {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  for (Connection* conn : connections_) {
    if (conn->region.load() == region_id) conn->socket.shutdown_both();
  }
}

void Server::accept_loop() {
  while (!stop_.load()) {
    std::string address;
    net::Socket socket = net::accept_tcp(listener_, stop_, &address);
    if (!socket.valid()) break;
    auto conn = std::make_unique<Connection>();
    conn->socket = std::move(socket);
    conn->address = address;
    Connection* raw = conn.get();
    std::lock_guard<std::mutex> lock(connections_mutex_);
    if (pending_ >= config_.max_pending_connections && !evict_oldest_pending(address)) {
      MORI_IO_LOG(Warning, "engine '" << config_.key << "' refused a connection from " << address << ": already "
                                      << pending_
                                      << " connections awaiting authentication (MORI_IO_MAX_PENDING_CONNECTIONS)");
      continue;  // the socket closes here
    }
    raw->accepted = ++accepted_;
    connections_.insert(raw);
    ++pending_;
    try {
      std::thread([this, c = std::move(conn)]() mutable { run(std::move(c)); }).detach();
    } catch (const std::system_error& e) {
      // The lambda (and with it the connection) was destroyed with the thread that did not start.
      connections_.erase(raw);
      --pending_;
      MORI_IO_LOG(Error, "engine '" << config_.key << "' cannot serve " << address << ": no thread (" << e.what()
                                    << ")");
    }
  }
}

bool Server::evict_oldest_pending(const std::string& newcomer) {
  Connection* oldest = nullptr;
  for (Connection* conn : connections_) {
    if (conn->authenticated || conn->evicted) continue;
    if (oldest == nullptr || conn->accepted < oldest->accepted) oldest = conn;
  }
  if (oldest == nullptr) return false;  // all already on their way out
  oldest->evicted = true;
  oldest->socket.shutdown_both();  // its thread ends within a poll slice and frees the slot
  MORI_IO_LOG(Warning, "engine '" << config_.key << "' closed the connection from " << oldest->address
                                  << ", still unauthenticated, to make room for " << newcomer << " ("
                                  << config_.max_pending_connections
                                  << " connections awaiting authentication, MORI_IO_MAX_PENDING_CONNECTIONS)");
  return true;
}

void Server::run(std::unique_ptr<Connection> conn) {
  if (authenticate(*conn)) serve(*conn);
  conn->socket.shutdown_both();  // the peer sees EOF now
  std::lock_guard<std::mutex> lock(connections_mutex_);
  connections_.erase(conn.get());
  --(conn->authenticated ? authenticated_ : pending_);
  conn.reset();  // the socket closes before the slot is announced free
  // Notified under the lock: stop() may destroy the Server as soon as it sees the set empty.
  connections_gone_.notify_all();
}

bool Server::authenticate(Connection& conn) {
  try {
    net::Hello hello = net::server_handshake(conn.socket, config_.secret, config_.key, config_.limits,
                                             config_.handshake_timeout_ms, &stop_);
    conn.peer = hello.key;
  } catch (const Error& e) {
    MORI_IO_LOG(Warning, "engine '" << config_.key << "' refused a connection from " << conn.address << ": "
                                    << e.what());
    return false;
  } catch (const std::exception& e) {
    MORI_IO_LOG(Error, "engine '" << config_.key << "': handshake with " << conn.address << " failed: " << e.what());
    return false;
  }
  std::lock_guard<std::mutex> lock(connections_mutex_);
  if (conn.evicted) return false;  // its socket is shut already
  if (authenticated_ >= config_.max_connections) {
    MORI_IO_LOG(Warning, "engine '" << config_.key << "' refused engine '" << conn.peer << "' (" << conn.address
                                    << "): already " << authenticated_
                                    << " authenticated connections (MORI_IO_MAX_CONNECTIONS)");
    return false;
  }
  --pending_;
  ++authenticated_;
  conn.authenticated = true;
  return true;
}

void Server::serve(Connection& conn) {
  net::apply_options(conn.socket, config_.options);
  std::vector<uint8_t> table;
  std::vector<iovec> iov;
  std::vector<char> discard(kDiscardBytes);
  conn.reader = std::make_unique<net::StreamReader>(conn.socket);  // once authenticated: NOTE [buffered frame reads]
  try {
    for (;;) {
      uint8_t raw[net::kFrameHeaderBytes];
      conn.reader->read(raw, sizeof(raw), net::never(), &stop_);
      net::FrameHeader header = net::decode_header(raw);
      switch (header.type) {
        case net::FrameType::Write:
        case net::FrameType::Read:
          serve_data(conn, header, table, iov, discard);
          break;
        case net::FrameType::MemQuery:
        case net::FrameType::Ping:
          serve_query(conn, header);
          break;
        case net::FrameType::RdmaConnect:
        case net::FrameType::RdmaKey:
          serve_rdma(conn, header);
          break;
        case net::FrameType::Response:
          throw Error(Code::Protocol, "a response frame sent to the target");
      }
    }
  } catch (const Error& e) {
    auto level = e.code() == Code::Protocol ? log::Level::Warning : log::Level::Debug;
    if (log::enabled(level)) {
      log::write(level, "engine '" + config_.key + "' closed the connection from '" + conn.peer + "' (" +
                            conn.address + "): " + e.what());
    }
  } catch (const std::exception& e) {
    MORI_IO_LOG(Error, "connection from '" << conn.peer << "' failed: " << e.what());
  }
  conn.region.store(kNoRegion);
}

void Server::serve_data(Connection& conn, const net::FrameHeader& header, std::vector<uint8_t>& table,
                        std::vector<iovec>& iov, std::vector<char>& discard) {
  // Bounds on the header first: anything past them is not a frame a mori.io initiator makes.
  if (header.nseg > config_.limits.max_segments) {
    throw Error(Code::Protocol, "frame of " + std::to_string(header.nseg) + " segments (limit " +
                                    std::to_string(config_.limits.max_segments) + ")");
  }
  if (header.payload > config_.limits.max_frame_bytes) {
    throw Error(Code::Protocol, "frame of " + std::to_string(header.payload) + " bytes (limit " +
                                    std::to_string(config_.limits.max_frame_bytes) + ")");
  }
  if (header.total == 0 || header.seq >= header.total) throw Error(Code::Protocol, "frame number out of range");
  net::Deadline deadline = net::after_ms(config_.io_timeout_ms);
  table.resize(size_t(header.nseg) * net::kSegmentBytes);
  conn.reader->read(table.data(), table.size(), deadline, &stop_);
  uint64_t sum = 0;
  for (uint32_t i = 0; i < header.nseg; ++i) {
    uint64_t size = net::get_u64(table.data() + i * net::kSegmentBytes + 8);
    if (size > header.payload - sum) throw Error(Code::Protocol, "segment sizes exceed the frame's payload");
    sum += size;
  }
  if (sum != header.payload) throw Error(Code::Protocol, "segment sizes do not add up to the frame's payload");

  StatusCode code = StatusCode::SUCCESS;
  std::string message;
  RegionPin pin = regions_.pin(header.mem_id);
  Region* region = pin.get();
  if (region == nullptr) {
    code = StatusCode::ERR_NOT_FOUND;
    message = "memory id " + std::to_string(header.mem_id) + " is not registered with engine '" + config_.key + "'";
  } else {
    iov.clear();
    for (uint32_t i = 0; i < header.nseg; ++i) {
      uint64_t offset = net::get_u64(table.data() + i * net::kSegmentBytes);
      uint64_t size = net::get_u64(table.data() + i * net::kSegmentBytes + 8);
      if (!region->contains(offset, size)) {
        code = StatusCode::ERR_INVALID_ARGS;
        message = "segment [" + std::to_string(offset) + ", +" + std::to_string(size) + ") lies outside memory id " +
                  std::to_string(header.mem_id) + " of " + std::to_string(region->size) + " bytes";
        break;
      }
      iov.push_back(iovec{region->at(offset), size});
    }
    conn.region.store(header.mem_id);
  }

  const bool write = header.type == net::FrameType::Write;
  const bool gpu_region = code == StatusCode::SUCCESS && region->loc == MemoryLocation::GPU;
  if (write) {
    if (code == StatusCode::SUCCESS && gpu_region) {
      receive_into_gpu(conn, header, *region, iov, discard, deadline, &code, &message);
    } else if (code == StatusCode::SUCCESS) {
      conn.reader->read_iov(iov.data(), iov.size(), deadline, &stop_);
    } else {
      drain(*conn.reader, header.payload, discard, deadline, &stop_);
    }
  }
  if (!write && gpu_region && header.payload > 0) {
    // Every piece's copy is started before the response header promises the bytes.
    std::unique_ptr<gpu::Stager> stager;
    try {
      stager = std::make_unique<gpu::Stager>(region->device, iov, header.payload);
      message = stager->start_download();
    } catch (const Error& e) {
      message = e.what();
    }
    if (!message.empty()) code = StatusCode::ERR_GPU_OP;
    inbound_.record(conn.peer, header.uid, header.total, code, message);
    if (code != StatusCode::SUCCESS) {
      respond(conn, header, code, message, 0, nullptr, 0);
    } else {
      respond(conn, header, code, message, header.payload, nullptr, 0);
      stager->send(conn.socket, net::after_ms(config_.io_timeout_ms), &stop_);
    }
    conn.region.store(kNoRegion);
    return;
  }
  // Recorded before the initiator learns of success, so once its status says SUCCESS the
  // target's pop_inbound_transfer_status does too.
  inbound_.record(conn.peer, header.uid, header.total, code, message);
  if (!write && code == StatusCode::SUCCESS) {
    respond(conn, header, code, message, header.payload, iov.data(), iov.size());
  } else {
    respond(conn, header, code, message, 0, nullptr, 0);
  }
  conn.region.store(kNoRegion);
}

void Server::receive_into_gpu(Connection& conn, const net::FrameHeader& header, const Region& region,
                              const std::vector<iovec>& iov, std::vector<char>& discard, net::Deadline deadline,
                              StatusCode* code, std::string* message) {
  std::unique_ptr<gpu::Stager> stager;
  try {
    stager = std::make_unique<gpu::Stager>(region.device, iov, header.payload);
  } catch (const Error& e) {
    // No staging buffer or stream: the payload is read and dropped, the frame fails, the
    // connection goes on.
    *code = StatusCode::ERR_GPU_OP;
    *message = e.what();
    drain(*conn.reader, header.payload, discard, deadline, &stop_);
    return;
  }
  *message = stager->receive(*conn.reader, deadline, &stop_);
  if (!message->empty()) *code = StatusCode::ERR_GPU_OP;
}

void Server::serve_query(Connection& conn, const net::FrameHeader& header) {
  if (header.type == net::FrameType::Ping) {
    respond(conn, header, StatusCode::SUCCESS, "", 0, nullptr, 0);
    return;
  }
  RegionPin pin = regions_.pin(header.mem_id);
  if (!pin) {
    respond(conn, header, StatusCode::ERR_NOT_FOUND,
            "memory id " + std::to_string(header.mem_id) + " is not registered with engine '" + config_.key + "'", 0,
            nullptr, 0);
    return;
  }
  uint8_t size[8];
  net::put_u64(size, pin.get()->size);
  iovec iov{size, sizeof(size)};
  respond(conn, header, StatusCode::SUCCESS, "", sizeof(size), &iov, 1);
}

void Server::set_rdma(std::shared_ptr<RdmaResponder> rdma) {
  std::lock_guard<std::mutex> lock(rdma_mutex_);
  rdma_ = std::move(rdma);
}

void Server::serve_rdma(Connection& conn, const net::FrameHeader& header) {
  if (header.payload != 0 || header.nseg != 0) throw Error(Code::Protocol, "an RDMA request with a payload");
  std::shared_ptr<RdmaResponder> rdma;
  {
    std::lock_guard<std::mutex> lock(rdma_mutex_);
    rdma = rdma_;
  }
  if (!rdma) {
    respond(conn, header, StatusCode::ERR_NOT_FOUND, "engine '" + config_.key + "' has no RDMA backend", 0, nullptr,
            0);
    return;
  }
  std::string answer;
  try {
    answer = header.type == net::FrameType::RdmaConnect ? rdma->connect_info(conn.peer)
                                                        : rdma->memory_key(header.mem_id);
  } catch (const Error& e) {
    StatusCode code = e.code() == Code::NotFound ? StatusCode::ERR_NOT_FOUND : StatusCode::ERR_RDMA_OP;
    respond(conn, header, code, e.what(), 0, nullptr, 0);
    return;
  }
  iovec iov{answer.data(), answer.size()};
  respond(conn, header, StatusCode::SUCCESS, "", answer.size(), &iov, 1);
}

void Server::respond(const Connection& conn, const net::FrameHeader& request, StatusCode code,
                     const std::string& message, uint64_t payload_bytes, iovec* payload, size_t payload_count) {
  net::FrameHeader header;
  header.type = net::FrameType::Response;
  header.uid = request.uid;
  header.seq = request.seq;
  header.total = request.total;
  header.mem_id = static_cast<uint32_t>(code);
  std::string text = message.substr(0, net::kMaxMessageBytes);
  header.nseg = static_cast<uint32_t>(text.size());
  header.payload = payload_bytes;
  uint8_t raw[net::kFrameHeaderBytes];
  net::encode_header(header, raw);
  std::vector<iovec> iov;
  iov.reserve(2 + payload_count);
  iov.push_back(iovec{raw, sizeof(raw)});
  if (!text.empty()) iov.push_back(iovec{text.data(), text.size()});
  iov.insert(iov.end(), payload, payload + payload_count);
  net::send_iov(conn.socket, iov.data(), iov.size(), net::after_ms(config_.io_timeout_ms), &stop_);
}

}  // namespace mori::io
