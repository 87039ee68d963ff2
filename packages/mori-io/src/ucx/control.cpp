// SPDX-License-Identifier: MIT
#include "ucx/control.hpp"

#include "core/error.hpp"
#include "ucx/wire.hpp"

namespace mori::io::ucx {

ControlChannel::ControlChannel(const std::string& local_key, const RemoteEngine& remote, int64_t timeout_ms) {
  description_ = "engine '" + remote.key + "' at " + remote.host + ":" + std::to_string(remote.port);
  try {
    socket_ = net::connect_tcp(remote.host, remote.port, timeout_ms);
    net::SocketOptions options;
    options.sndbuf = 0;
    options.rcvbuf = 0;
    net::apply_options(socket_, options);
    net::Hello hello;
    hello.channel = net::Channel::Control;
    hello.key = local_key;
    net::client_handshake(socket_, remote.secret, hello, remote.key, timeout_ms);
  } catch (const Error& e) {
    throw Error(e.code(), "cannot connect to " + description_ + ": " + e.what());
  }
}

ControlChannel::~ControlChannel() { socket_.shutdown_both(); }

ControlChannel::Answer ControlChannel::request(net::FrameType type, uint32_t mem_id, int64_t timeout_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_.load()) throw Error(Code::Connection, "the control connection to " + description_ + " is closed");
  const net::Deadline deadline = net::after_ms(timeout_ms);
  try {
    return net::control_round_trip(socket_, type, mem_id, wire::kMaxAnswerBytes, deadline, &closed_);
  } catch (const Error& e) {
    closed_.store(true);
    socket_.shutdown_both();
    throw Error(e.code(), "control request to " + description_ + " failed: " + e.what());
  }
}

}  // namespace mori::io::ucx
