// SPDX-License-Identifier: MIT
#include "remote/tcp_conduit.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <system_error>

#include "bootstrap/handshake_gate.hpp"
#include "bootstrap/hmac_sha256.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/rma_apply.hpp"
#include "remote/time_account.hpp"
#include "remote/wire.hpp"

namespace mori::shmem::remote {

namespace {

constexpr size_t kNonceBytes = kGateNonceBytes;
// Small puts go out as one send of header + payload (one TCP segment); larger payloads are sent
// from where they are, after the header.
constexpr size_t kCoalesceBytes = 16 << 10;
constexpr double kHandshakeTimeoutS = 30;  // the dialing side's, for all its streams together
// How long one inbound connection may take to send its hello (NOTE [handshake gate]).
constexpr double kHelloTimeoutS = 5;
// How often the acceptor joins the threads of connections that ended, when nothing else wakes it.
constexpr double kReapIntervalS = 0.5;

struct Endpoint {
  char ip[16];
  uint16_t port;
};

Sha256Digest hello_mac(const Secret& secret, const uint8_t* nonce, const Hello& hello) {
  uint8_t message[kNonceBytes + 16];
  std::memcpy(message, nonce, kNonceBytes);
  std::memcpy(message + kNonceBytes, &hello, 16);  // version, rank, target, stream
  return hmac_sha256(secret.data(), secret.size(), message, sizeof(message));
}

bool fits(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

// Blocks until fd is readable or the stop pipe is written; false when stopping.
bool wait_readable_or_stop(int fd, int stop_fd) {
  for (;;) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    const int rc = poll(fds, 2, -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw_system_error("poll");
    }
    if (fds[1].revents != 0) return false;
    if (fds[0].revents != 0) return true;
  }
}

// Polls fd without sleeping for up to spin_ns; true once it is readable (a request, or its close).
bool readable_within(int fd, uint64_t spin_ns) {
  const uint64_t start = monotonic_ns();
  do {
    pollfd one{fd, POLLIN, 0};
    if (poll(&one, 1, 0) > 0) return true;
  } while (monotonic_ns() - start < spin_ns);
  return false;
}

}  // namespace

struct TcpConduit::Stream {
  Socket socket;
  std::mutex mutex;
  bool dirty = false;  // carried a put or signal since its last flush
  std::string broken;  // why the stream was given up ("" while usable)

  // Runs one exchange on the stream (its mutex held). A failure mid-exchange leaves the byte
  // stream out of step (a late answer would be read as the next call's), so the stream is closed
  // and every later call on it fails at once.
  template <typename Fn>
  void use(int pe, Fn&& exchange) {
    if (!broken.empty()) {
      throw_error(MORI_SHMEM_ERR_PEER_LOST, "the remote transport to PE ", pe, " failed earlier (", broken,
                  "); this PE cannot reach it any more");
    }
    try {
      exchange();
    } catch (const std::exception& e) {
      broken = e.what();
      socket.close();
      throw;
    }
  }
};

struct TcpConduit::Peer {
  std::vector<std::unique_ptr<Stream>> streams;
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> next_join{0};  // NOTE [striped put-with-signal]
};

struct TcpConduit::Inbound {
  Socket socket;
  std::thread thread;
  std::string who;                // "PE 3 (stream 1) from 10.0.0.2:51000"
  int rank = -1;                  // the initiator's PE
  std::atomic<bool> done{false};  // serve() returned: the acceptor joins the thread and frees this
};

TcpConduit::TcpConduit(Bootstrap& bootstrap, const std::vector<uint8_t>& remote, HeapAccess& heap,
                       const ConduitConfig& config)
    : rank_(bootstrap.rank()),
      heap_(heap),
      heap_size_(heap.size()),
      config_(config),
      max_inbound_(size_t(bootstrap.nranks()) * size_t(std::max(config.streams, 1))),
      secret_(bootstrap.secret()),
      peers_(bootstrap.nranks()) {
  if (config_.streams < 1 || config_.streams > 64) {
    throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_REMOTE_STREAMS=", config_.streams, " must be in [1, 64]");
  }
  crew_ = std::make_unique<StripeCrew>(config_.streams - 1);
  if (pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) throw_system_error("pipe2");
  try {
    ip_ = interface_ipv4(config_.ifname);
    listener_ = listen_tcp(ip_, 0, false);
    Endpoint mine{};
    std::strncpy(mine.ip, ip_.c_str(), sizeof(mine.ip) - 1);
    mine.port = local_port(listener_);
    std::vector<Endpoint> all(bootstrap.nranks());
    bootstrap.allgather(&mine, all.data(), sizeof(Endpoint), "remote: endpoints");
    acceptor_ = std::thread([this] { accept_loop(); });

    const Deadline deadline = Deadline::after(kHandshakeTimeoutS);
    for (int pe = 0; pe < bootstrap.nranks(); ++pe) {
      if (!remote[pe]) continue;
      auto peer = std::make_unique<Peer>();
      const std::string ip(all[pe].ip, strnlen(all[pe].ip, sizeof(all[pe].ip)));
      for (int s = 0; s < config_.streams; ++s) {
        const std::string name = "PE " + std::to_string(pe) + " at " + ip + ":" + std::to_string(all[pe].port) +
                                 " (remote transport, stream " + std::to_string(s) + ")";
        auto stream = std::make_unique<Stream>();
        stream->socket = connect_with_retry(ip, all[pe].port, deadline, name);
        uint8_t nonce[kNonceBytes];
        stream->socket.recv_all(nonce, sizeof(nonce), deadline, "the server's nonce");
        Hello hello{kWireVersion, rank_, pe, s, {}};
        const Sha256Digest mac = hello_mac(secret_, nonce, hello);
        std::memcpy(hello.mac, mac.data(), mac.size());
        stream->socket.send_all(&hello, sizeof(hello), deadline, "the hello");
        Reply welcome{};
        stream->socket.recv_all(&welcome, sizeof(welcome), deadline, "the server's welcome");
        if (welcome.status != 0) {
          throw_error(MORI_SHMEM_ERR_AUTH, name, " refused this PE (status ", welcome.status, ")");
        }
        peer->streams.push_back(std::move(stream));
      }
      peers_[pe] = std::move(peer);
    }
    bootstrap.barrier("remote: connected");
  } catch (...) {
    stop();  // the threads; the other members go with the unwinding
    close_stop_pipe();
    throw;
  }
  log::emit(log::Level::Info, "PE ", rank_, ": remote transport on ", endpoint(), ", ", config_.streams,
            " TCP stream(s) per remote PE");
}

TcpConduit::~TcpConduit() {
  stop();
  peers_.clear();
  listener_.close();
  close_stop_pipe();
}

void TcpConduit::close_stop_pipe() noexcept {
  for (int& fd : stop_pipe_) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

void TcpConduit::stop() noexcept {
  if (stopping_.exchange(true)) return;
  if (stop_pipe_[1] >= 0) {
    const char byte = 1;
    (void)!write(stop_pipe_[1], &byte, 1);
  }
  if (acceptor_.joinable()) acceptor_.join();
  {
    // Wakes serve threads blocked in a read with a deadline (a client that never finishes its
    // hello, a request cut short): they see EOF at once.
    std::lock_guard<std::mutex> lock(inbound_mutex_);
    for (auto& in : inbound_) {
      if (in->socket.valid()) ::shutdown(in->socket.fd(), SHUT_RDWR);
    }
  }
  std::vector<std::unique_ptr<Inbound>> inbound;
  {
    std::lock_guard<std::mutex> lock(inbound_mutex_);
    inbound.swap(inbound_);
  }
  for (auto& in : inbound) {
    if (in->thread.joinable()) in->thread.join();
  }
}

std::string TcpConduit::endpoint() const { return ip_ + ":" + std::to_string(local_port(listener_)); }

// ---- server side ---------------------------------------------------------------------------------

void TcpConduit::accept_loop() {
  // NOTE [handshake gate]: unauthenticated connections are multiplexed here, on this thread; only
  // one that proved the job secret gets a serve thread, and that thread is joined as soon as its
  // connection ends.
  GateLimits limits;
  limits.hello_timeout_s = kHelloTimeoutS;
  HandshakeGate gate(listener_, sizeof(Hello), limits, "PE " + std::to_string(rank_) + "'s remote transport");
  while (!stopping_.load()) {
    try {
      // Wakes at least every kReapInterval to join the threads of connections that ended.
      std::vector<Arrival> arrivals = gate.step(Deadline::after(kReapIntervalS), stop_pipe_[0]);
      reap_inbound();
      if (stopping_.load()) return;
      for (Arrival& arrival : arrivals) admit(arrival, gate);
    } catch (const std::exception& e) {
      log::emit(log::Level::Error, "PE ", rank_, ": remote transport stopped accepting: ", e.what());
      return;
    }
  }
}

void TcpConduit::admit(Arrival& arrival, HandshakeGate& gate) {
  Hello hello{};
  std::memcpy(&hello, arrival.hello.data(), sizeof(hello));
  const Sha256Digest mac = hello_mac(secret_, arrival.nonce.data(), hello);
  const char* refusal = nullptr;
  if (hello.version != kWireVersion) {
    refusal = "unknown protocol version";
  } else if (hello.target != rank_ || !constant_time_equal(mac.data(), hello.mac, 32)) {
    refusal = "it does not hold the job secret";
  }
  std::lock_guard<std::mutex> lock(inbound_mutex_);
  if (refusal == nullptr && inbound_.size() >= max_inbound_) {
    // Only holders of the secret get here; more connections than the job has streams means a
    // peer reconnects in a loop, and each would cost a thread.
    refusal = "this PE already serves as many connections as the job has streams";
  }
  if (refusal != nullptr) {
    gate.refused(arrival.socket.peer(), refusal);
    const Reply reply{MORI_SHMEM_ERR_AUTH, 0, 0};
    arrival.socket.try_send(&reply, sizeof(reply));
    return;  // the socket closes with the arrival
  }
  const Reply welcome{0, 0, 0};
  if (!arrival.socket.try_send(&welcome, sizeof(welcome))) {
    gate.refused(arrival.socket.peer(), "could not send it the welcome");
    return;
  }
  auto inbound = std::make_unique<Inbound>();
  inbound->who = "PE " + std::to_string(hello.rank) + " (stream " + std::to_string(hello.stream) + ") from " +
                 arrival.socket.peer();
  inbound->rank = hello.rank;
  inbound->socket = std::move(arrival.socket);
  inbound->socket.set_peer(inbound->who);
  Inbound* raw = inbound.get();
  inbound_.push_back(std::move(inbound));
  try {
    raw->thread = std::thread([this, raw] { serve(raw); });
  } catch (const std::system_error& e) {
    // Out of threads: refuse this connection, keep serving the others.
    log::emit(log::Level::Error, "PE ", rank_, ": remote transport could not start a thread for ", raw->who, ": ",
              e.what());
    inbound_.pop_back();
  }
}

void TcpConduit::reap_inbound() {
  std::vector<std::unique_ptr<Inbound>> finished;
  {
    std::lock_guard<std::mutex> lock(inbound_mutex_);
    for (auto it = inbound_.begin(); it != inbound_.end();) {
      if ((*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = inbound_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& in : finished) {
    if (in->thread.joinable()) in->thread.join();  // it has returned from serve(): no wait
  }
}

void TcpConduit::serve(Inbound* inbound) {
  Socket& socket = inbound->socket;
  try {
    const uint64_t spin_ns = uint64_t(config_.serve_spin_us) * 1000;
    while (wait_readable_or_stop(socket.fd(), stop_pipe_[0])) {
      do {
        serve_one(*inbound);
      } while (spin_ns > 0 && !stopping_.load() && readable_within(socket.fd(), spin_ns));
    }
  } catch (const Error& e) {
    // A peer that finalized (or died) closes its streams: that ends this thread, quietly unless
    // it happened in the middle of a request.
    if (!stopping_.load() && e.status() != MORI_SHMEM_ERR_PEER_LOST) {
      log::emit(log::Level::Error, "PE ", rank_, ": remote transport dropped ", inbound->who, ": ", e.what());
    } else {
      log::emit(log::Level::Debug, "PE ", rank_, ": ", inbound->who, " disconnected: ", e.what());
    }
  } catch (const std::exception& e) {
    log::emit(log::Level::Error, "PE ", rank_, ": remote transport dropped ", inbound->who, ": ", e.what());
  }
  close_inbound(socket);
  inbound->done.store(true);
}

// Under the mutex, so that stop() never shuts down a descriptor number that was closed and reused.
void TcpConduit::close_inbound(Socket& socket) {
  std::lock_guard<std::mutex> lock(inbound_mutex_);
  socket.close();
}

void TcpConduit::serve_one(Inbound& inbound) {
  Socket& socket = inbound.socket;
  const Deadline deadline = Deadline::after(config_.timeout_s);
  Request request{};
  socket.recv_all(&request, sizeof(request), deadline, "a request");
  const auto reject = [&](const char* why) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "request op ", int(request.op), " offset ", request.offset,
                " length ", request.length, ": ", why, " (heap of ", heap_size_, " bytes)");
  };
  if (request.magic != kWireMagic) reject("bad magic");
  switch (static_cast<Op>(request.op)) {
    case Op::Put:
    case Op::PutSignal: {
      if (!fits(request.offset, request.length, heap_size_)) reject("outside the heap");
      const bool signalled = static_cast<Op>(request.op) == Op::PutSignal;
      if (signalled && (!fits(request.signal_offset, 8, heap_size_) || request.signal_offset % 8 != 0)) {
        reject("signal word outside the heap or misaligned");
      }
      if (signalled) {
        heap_.receive_signalled(socket, request.offset, request.length, deadline, request.signal_offset,
                                request.value, request.amo);
      } else {
        heap_.receive(socket, request.offset, request.length, deadline);
      }
      return;
    }
    case Op::PutSignalPart: {
      if (!fits(request.offset, request.length, heap_size_)) reject("outside the heap");
      if (!fits(request.signal_offset, 8, heap_size_) || request.signal_offset % 8 != 0) {
        reject("signal word outside the heap or misaligned");
      }
      const uint32_t parts = uint32_t(request.compare & 0xff);
      if (parts < 2) reject("a put-with-signal part of a join of fewer than 2 parts");
      heap_.receive(socket, request.offset, request.length, deadline);
      if (joins_.arrived(inbound.rank, request.compare >> 8, parts)) {
        heap_.signal(request.signal_offset, request.value, request.amo);
      }
      return;
    }
    case Op::Signal:
      if (!fits(request.offset, 8, heap_size_) || request.offset % 8 != 0) reject("signal word outside the heap");
      heap_.signal(request.offset, request.value, request.amo);
      return;
    case Op::Get: {
      if (!fits(request.offset, request.length, heap_size_)) reject("outside the heap");
      const Reply reply{0, 0, 0};
      socket.send_all(&reply, sizeof(reply), deadline, "a get's answer");
      heap_.send(socket, request.offset, request.length, deadline);
      return;
    }
    case Op::Amo: {
      const size_t width = rma::amo_width(request.type);
      if (!fits(request.offset, width, heap_size_) || request.offset % width != 0) {
        reject("atomic word outside the heap or misaligned");
      }
      const uint64_t old = heap_.amo(request.offset, request.amo, request.type, request.value, request.compare);
      const Reply reply{0, 0, old};
      socket.send_all(&reply, sizeof(reply), deadline, "an atomic's answer");
      return;
    }
    case Op::Flush: {
      const Reply reply{0, 0, 0};
      socket.send_all(&reply, sizeof(reply), deadline, "a flush's answer");
      return;
    }
  }
  reject("unknown op");
}

// ---- initiator side ----------------------------------------------------------------------------

TcpConduit::Stream& TcpConduit::pick(int pe, size_t index) {
  Peer* peer = (pe >= 0 && size_t(pe) < peers_.size()) ? peers_[pe].get() : nullptr;
  if (peer == nullptr) throw_error(MORI_SHMEM_ERR_INTERNAL, "PE ", pe, " is not reached by the remote transport");
  return *peer->streams[index % peer->streams.size()];
}

void TcpConduit::send_request(Stream& stream, const void* request, const uint8_t* src, size_t begin, size_t nbytes,
                              const Staged* staged) {
  const Deadline deadline = Deadline::after(config_.timeout_s);
  const auto in_place = [&](size_t from) { return staged ? (*staged)(begin + from, nbytes - from) : nbytes - from; };
  if (nbytes > 0 && nbytes <= kCoalesceBytes) {
    for (size_t ready = 0; ready < nbytes;) ready += in_place(ready);
    uint8_t buffer[sizeof(Request) + kCoalesceBytes];
    std::memcpy(buffer, request, sizeof(Request));
    std::memcpy(buffer + sizeof(Request), src + begin, nbytes);
    stream.socket.send_all(buffer, sizeof(Request) + nbytes, deadline, "a put");
    return;
  }
  stream.socket.send_all(request, sizeof(Request), deadline, "a request");
  for (size_t sent = 0; sent < nbytes;) {
    const size_t ready = in_place(sent);
    stream.socket.send_all(src + begin + sent, ready, deadline, "a put's payload");
    sent += ready;
  }
}

namespace {
size_t stripe_chunk(size_t nbytes, size_t streams) { return ((nbytes + streams - 1) / streams + 63) & ~size_t(63); }
}  // namespace

size_t TcpConduit::stripes_for(int pe, size_t nbytes) const {
  const Peer* peer = (pe >= 0 && size_t(pe) < peers_.size()) ? peers_[pe].get() : nullptr;
  return peer != nullptr && nbytes > config_.stripe_bytes ? peer->streams.size() : 1;
}

size_t TcpConduit::stripe_bytes(int pe, size_t nbytes) const {
  const size_t streams = stripes_for(pe, nbytes);
  return streams > 1 ? stripe_chunk(nbytes, streams) : nbytes;
}

// Runs exchange(stream, begin, length, parts) for each of the `parts` stripes of an nbytes transfer
// to pe, each on its own stream, the first on the caller's thread and the others on the crew's (one
// stripe up to stripe_bytes).
template <typename Exchange>
void TcpConduit::striped(int pe, size_t nbytes, Exchange&& exchange) {
  Peer& peer = *peers_[pe];
  const size_t streams = stripes_for(pe, nbytes);
  const size_t first = peer.next.fetch_add(1);
  const size_t chunk = stripe_chunk(nbytes, streams);
  const size_t parts = nbytes == 0 ? 1 : (nbytes + chunk - 1) / chunk;  // the stripes that hold bytes
  crew_->run(parts, [&](size_t i) {
    const size_t begin = i * chunk;
    Stream& stream = pick(pe, first + i);
    std::lock_guard<std::mutex> lock(stream.mutex);
    stream.use(pe, [&] { exchange(stream, begin, std::min(chunk, nbytes - begin), parts); });
  });
}

void TcpConduit::put_from(int pe, uint64_t offset, const void* src, size_t nbytes, const Staged* staged) {
  if (nbytes == 0) return;
  striped(pe, nbytes, [&](Stream& stream, size_t begin, size_t length, size_t) {
    const Request request{kWireMagic, uint8_t(Op::Put), 0, 0, offset + begin, length, 0, 0, 0};
    stream.dirty = true;
    send_request(stream, &request, static_cast<const uint8_t*>(src), begin, length, staged);
  });
}

void TcpConduit::get(int pe, uint64_t offset, void* dest, size_t nbytes) {
  if (nbytes == 0) return;
  striped(pe, nbytes, [&](Stream& stream, size_t begin, size_t length, size_t) {
    const Request request{kWireMagic, uint8_t(Op::Get), 0, 0, offset + begin, length, 0, 0, 0};
    const Deadline deadline = Deadline::after(config_.timeout_s);
    send_request(stream, &request);
    Reply reply{};
    stream.socket.recv_all(&reply, sizeof(reply), deadline, "a get's answer");
    if (reply.status != 0) throw_error(mori_shmem_status_t(reply.status), "PE ", pe, " refused a get");
    stream.socket.recv_all(static_cast<uint8_t*>(dest) + begin, length, deadline, "a get's data");
  });
}

void TcpConduit::put_signal_from(int pe, uint64_t offset, const void* src, size_t nbytes, uint64_t signal_offset,
                                 uint64_t signal, int sig_op, const Staged* staged) {
  const uint8_t* bytes = static_cast<const uint8_t*>(src);
  if (stripes_for(pe, nbytes) > 1) {
    // NOTE [striped put-with-signal]: a part per stream; the target applies the signal after the last.
    const uint64_t join = peers_[pe]->next_join.fetch_add(1) & (~0ull >> 8);
    striped(pe, nbytes, [&](Stream& part_stream, size_t begin, size_t length, size_t parts) {
      const Request request{kWireMagic, uint8_t(Op::PutSignalPart), 0, sig_op, offset + begin, length, signal,
                            join << 8 | parts, signal_offset};
      part_stream.dirty = true;
      send_request(part_stream, &request, bytes, begin, length, staged);
    });
    return;
  }
  // One request on one stream: the server applies the signal after the last payload byte.
  Stream& stream = pick(pe, peers_[pe]->next.fetch_add(1));
  const Request request{kWireMagic, uint8_t(Op::PutSignal), 0, sig_op, offset, nbytes, signal, 0, signal_offset};
  std::lock_guard<std::mutex> lock(stream.mutex);
  stream.use(pe, [&] {
    stream.dirty = true;
    send_request(stream, &request, bytes, 0, nbytes, staged);
  });
}

void TcpConduit::signal(int pe, uint64_t signal_offset, uint64_t value, int sig_op) {
  Stream& stream = pick(pe, peers_[pe]->next.fetch_add(1));
  const Request request{kWireMagic, uint8_t(Op::Signal), 0, sig_op, signal_offset, 0, value, 0, 0};
  std::lock_guard<std::mutex> lock(stream.mutex);
  stream.use(pe, [&] {
    stream.dirty = true;
    send_request(stream, &request);
  });
}

uint64_t TcpConduit::atomic(int pe, uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) {
  Stream& stream = pick(pe, peers_[pe]->next.fetch_add(1));
  const Request request{kWireMagic, uint8_t(Op::Amo), uint8_t(type), amo, offset, 0, value, compare, 0};
  const Deadline deadline = Deadline::after(config_.timeout_s);
  std::lock_guard<std::mutex> lock(stream.mutex);
  Reply reply{};
  stream.use(pe, [&] {
    send_request(stream, &request);
    stream.socket.recv_all(&reply, sizeof(reply), deadline, "an atomic's answer");
    if (reply.status != 0) throw_error(mori_shmem_status_t(reply.status), "PE ", pe, " refused an atomic");
  });
  return reply.value;
}

void TcpConduit::quiet() {
  // Every stream that carried a put gets a FLUSH; all are sent before any answer is awaited, so a
  // quiet costs one round trip however many peers it covers. Locks are taken in one fixed order.
  std::vector<std::unique_lock<std::mutex>> locks;
  std::vector<std::pair<Stream*, int>> flushed;
  const Request request{kWireMagic, uint8_t(Op::Flush), 0, 0, 0, 0, 0, 0, 0};
  for (size_t pe = 0; pe < peers_.size(); ++pe) {
    if (!peers_[pe]) continue;
    for (auto& stream : peers_[pe]->streams) {
      std::unique_lock<std::mutex> lock(stream->mutex);
      if (!stream->dirty) continue;
      stream->use(int(pe), [&] { send_request(*stream, &request); });
      flushed.emplace_back(stream.get(), int(pe));
      locks.push_back(std::move(lock));
    }
  }
  const Deadline deadline = Deadline::after(config_.timeout_s);
  for (auto& [stream, pe] : flushed) {
    stream->use(pe, [&] {
      Reply reply{};
      stream->socket.recv_all(&reply, sizeof(reply), deadline, "the answer to a quiet");
      stream->dirty = false;
    });
  }
}

}  // namespace mori::shmem::remote
