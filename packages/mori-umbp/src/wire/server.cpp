// SPDX-License-Identifier: MIT
#include "wire/server.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <string_view>
#include <vector>

namespace mori::umbp::wire {

namespace {

// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as Python's decode():
// the node id becomes a Python str.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t extra = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (size_t k = 1; k <= extra; ++k) {
      const auto b = uint8_t(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += extra + 1;
  }
  return true;
}

void send_bytes(int fd, const void* data, size_t n, Deadline deadline) {
  iovec piece{const_cast<void*>(data), n};
  write_all(fd, &piece, 1, deadline);
}

}  // namespace

Server::Server(std::string secret, const std::string& host, size_t max_connections, double handshake_timeout_s,
               double idle_timeout_s, Dispatch dispatch, Report report)
    : secret_(std::move(secret)),
      max_connections_(max_connections),
      handshake_timeout_s_(handshake_timeout_s),
      idle_timeout_s_(idle_timeout_s),
      dispatch_(std::move(dispatch)),
      report_(std::move(report)) {
  listener_ = listen_on(host, &port_);
  acceptor_ = std::thread([this] { accept_loop(); });
}

Server::~Server() { stop(); }

void Server::stop() {
  if (!stopping_.exchange(true)) {  // the first stop (Python's, then the destructor's) ends the acceptor
    listener_.shutdown();
    acceptor_.join();
    listener_.close();  // a caller now gets a refused connection at once, not a silent backlog
  }
  std::unique_lock<std::mutex> lock(mutex_);
  for (int fd : live_) ::shutdown(fd, SHUT_RDWR);
  idle_.wait(lock, [this] { return live_.empty(); });
}

void Server::accept_loop() {
  while (!stopping_.load()) {
    pollfd p{listener_.get(), POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;
    if (stopping_.load()) return;
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;  // out of descriptors, or the caller gave up already: not fatal
    }
    Fd conn(fd);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Full, or too many handshakes at once: closed at once (the caller makes gRPC calls).
      if (live_.size() >= max_connections_ || handshakes_ >= kMaxHandshakes) continue;
      live_.insert(fd);
      ++handshakes_;
    }
    std::thread([this, c = std::move(conn)]() mutable { serve(std::move(c)); }).detach();
  }
}

void Server::end_connection(int fd, bool handshaking) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (handshaking) --handshakes_;
  live_.erase(fd);
  if (live_.empty()) idle_.notify_all();
}

void Server::serve(Fd conn) {
  const int fd = conn.get();
  bool handshaking = true;
  std::string node;
  try {
    make_wire_socket(fd);
    Reader reader(fd);
    FrameKeys keys;
    const bool member = handshake(fd, reader, &node, &keys);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --handshakes_;
      handshaking = false;
    }
    if (member) frames(fd, reader, node, keys);
  } catch (const Closed&) {
    // The caller went away, timed out or broke the protocol: nothing to answer.
  } catch (const Timeout&) {
  } catch (const SocketError&) {
  } catch (const std::exception& e) {
    if (report_) report_(node, e.what());  // this side failed: said, not swallowed
  }
  conn.close();  // before the slot is given back: stop() waits for both
  end_connection(fd, handshaking);
}

bool Server::handshake(int fd, Reader& reader, std::string* node, FrameKeys* keys) {
  const Deadline deadline = after_s(handshake_timeout_s_);
  uint8_t hello[kMagicBytes + kNonceBytes];
  std::memcpy(hello, kMagic, kMagicBytes);
  if (::mori::common::fill_random(hello + kMagicBytes, kNonceBytes) != 0) return false;
  const uint8_t* s_nonce = hello + kMagicBytes;
  send_bytes(fd, hello, sizeof(hello), deadline);

  uint8_t head[kMagicBytes + kNonceBytes + 2];
  reader.read(head, sizeof(head), deadline);
  const size_t node_len = size_t(head[sizeof(head) - 2]) | size_t(head[sizeof(head) - 1]) << 8;
  if (std::memcmp(head, kMagic, kMagicBytes) != 0 || node_len > kMaxNodeIdBytes) return false;
  const uint8_t* c_nonce = head + kMagicBytes;
  std::vector<uint8_t> rest(node_len + kTagBytes);
  reader.read(rest.data(), rest.size(), deadline);
  node->assign(reinterpret_cast<const char*>(rest.data()), node_len);
  const Digest expected = handshake_mac(secret_, "client", s_nonce, c_nonce, *node);
  if (!::mori::common::constant_time_equal(rest.data() + node_len, expected.data(), kTagBytes) ||
      !valid_utf8(*node)) {
    send_bytes(fd, &kRefused, 1, deadline);
    return false;
  }
  uint8_t welcome[1 + kTagBytes];
  welcome[0] = kOk;
  const Digest proof = handshake_mac(secret_, "server", s_nonce, c_nonce, *node);
  std::memcpy(welcome + 1, proof.data(), kTagBytes);
  send_bytes(fd, welcome, sizeof(welcome), deadline);
  *keys = frame_keys(secret_, s_nonce, c_nonce, *node);
  return true;
}

void Server::frames(int fd, Reader& reader, const std::string& node, const FrameKeys& keys) {
  std::string name, body;
  for (uint64_t seq = 0; !stopping_.load(); ++seq) {
    const Deadline deadline = after_s(idle_timeout_s_);  // for the next frame, whole
    uint8_t header[kHeaderBytes];
    try {
      reader.read(header, sizeof(header), deadline);
    } catch (const Timeout&) {
      return;  // idle past idle_timeout_s_
    }
    const Header request = unpack(header);
    if (request.size > kMaxFrameBytes) return;  // before anything is allocated
    name.resize(request.last);
    body.resize(request.size);
    uint8_t tag[kTagBytes];
    reader.read(name.data(), name.size(), deadline);
    reader.read(body.data(), body.size(), deadline);
    reader.read(tag, sizeof(tag), deadline);
    const Digest expected =
        keys.c2s.over({{header, sizeof(header)}, {name.data(), name.size()}, {body.data(), body.size()}});
    // Forged, replayed or reordered: the connection is not to be trusted.
    if (request.seq != seq || !::mori::common::constant_time_equal(tag, expected.data(), kTagBytes)) return;

    Answer answer = dispatch_(node, name, std::move(body));
    uint8_t out[kHeaderBytes];
    pack(Header{uint32_t(answer.second.size()), seq, answer.first}, out);
    const Digest mac = keys.s2c.over({{out, sizeof(out)}, {answer.second.data(), answer.second.size()}});
    iovec pieces[3] = {{out, sizeof(out)},
                       {answer.second.data(), answer.second.size()},
                       {const_cast<uint8_t*>(mac.data()), mac.size()}};
    write_all(fd, pieces, 3, after_s(idle_timeout_s_));
    body.clear();
  }
}

}  // namespace mori::umbp::wire
