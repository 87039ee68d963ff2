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
    net::FrameHeader header;
    header.type = type;
    header.mem_id = mem_id;
    header.total = 1;
    uint8_t raw[net::kFrameHeaderBytes];
    net::encode_header(header, raw);
    net::send_all(socket_, raw, sizeof(raw), deadline, &closed_);
    net::recv_all(socket_, raw, sizeof(raw), deadline, &closed_);
    net::FrameHeader response = net::decode_header(raw);
    if (response.type != net::FrameType::Response || response.nseg > net::kMaxMessageBytes ||
        response.payload > wire::kMaxAnswerBytes) {
      throw Error(Code::Protocol, "malformed answer to an RDMA control request");
    }
    const auto code = static_cast<StatusCode>(response.mem_id);
    if (!is_final(code) || response.mem_id > static_cast<uint32_t>(StatusCode::ERR_GPU_OP)) {
      throw Error(Code::Protocol, "answer carries an invalid status code " + std::to_string(response.mem_id));
    }
    Answer answer;
    answer.code = code;
    answer.message.assign(response.nseg, '\0');
    net::recv_all(socket_, answer.message.data(), answer.message.size(), deadline, &closed_);
    answer.payload.assign(response.payload, '\0');
    net::recv_all(socket_, answer.payload.data(), answer.payload.size(), deadline, &closed_);
    return answer;
  } catch (const Error& e) {
    closed_.store(true);
    socket_.shutdown_both();
    throw Error(e.code(), "control request to " + description_ + " failed: " + e.what());
  }
}

}  // namespace mori::io::ucx
