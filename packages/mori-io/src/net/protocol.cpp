// SPDX-License-Identifier: MIT
#include "net/protocol.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "crypto/hmac.hpp"
#include "core/error.hpp"

namespace mori::io::net {

namespace {

constexpr uint32_t kFrameMagic = 0x464f494d;      // "MIOF" read little-endian
constexpr uint32_t kHelloMagic = 0x484f494d;      // "MIOH"
constexpr uint32_t kChallengeMagic = 0x434f494d;  // "MIOC"
constexpr uint32_t kAcceptMagic = 0x4b4f494d;     // "MIOK"
constexpr uint32_t kRejectMagic = 0x4e4f494d;     // "MION"
constexpr size_t kNonceBytes = 32;
constexpr size_t kHelloFixedBytes = 4 + 2 + 1 + 1 + 2 + 2 + kNonceBytes;
constexpr size_t kChallengeBytes = 4 + kNonceBytes + 32 + 8 + 4;

crypto::Digest mac(const std::string& secret, const char* label, const uint8_t* first, const uint8_t* second,
                   const std::string& key, const std::string& extra) {
  std::vector<uint8_t> msg;
  msg.insert(msg.end(), label, label + std::strlen(label));
  msg.insert(msg.end(), first, first + kNonceBytes);
  msg.insert(msg.end(), second, second + kNonceBytes);
  uint8_t len[2];
  put_u16(len, uint16_t(key.size()));  // length prefixes keep "ab"+"c" and "a"+"bc" apart
  msg.insert(msg.end(), len, len + 2);
  msg.insert(msg.end(), key.begin(), key.end());
  msg.insert(msg.end(), extra.begin(), extra.end());
  return crypto::hmac_sha256(reinterpret_cast<const uint8_t*>(secret.data()), secret.size(), msg.data(), msg.size());
}

}  // namespace

TargetLimits clamp(TargetLimits announced) {
  announced.max_frame_bytes = std::clamp(announced.max_frame_bytes, kMinFrameBytes, kMaxFrameBytes);
  announced.max_segments = std::clamp(announced.max_segments, kMinSegments, kMaxSegments);
  return announced;
}

void encode_header(const FrameHeader& h, uint8_t out[kFrameHeaderBytes]) {
  put_u32(out, kFrameMagic);
  out[4] = uint8_t(h.type);
  out[5] = h.flags;
  put_u16(out + 6, 0);
  put_u64(out + 8, h.uid);
  put_u32(out + 16, h.seq);
  put_u32(out + 20, h.total);
  put_u32(out + 24, h.mem_id);
  put_u32(out + 28, h.nseg);
  put_u64(out + 32, h.payload);
}

FrameHeader decode_header(const uint8_t in[kFrameHeaderBytes]) {
  if (get_u32(in) != kFrameMagic) throw Error(Code::Protocol, "bad frame magic");
  uint8_t type = in[4];
  if (type < uint8_t(FrameType::Write) || type > uint8_t(FrameType::RdmaKey)) {
    throw Error(Code::Protocol, "unknown frame type " + std::to_string(type));
  }
  FrameHeader h;
  h.type = FrameType(type);
  h.flags = in[5];
  h.uid = get_u64(in + 8);
  h.seq = get_u32(in + 16);
  h.total = get_u32(in + 20);
  h.mem_id = get_u32(in + 24);
  h.nseg = get_u32(in + 28);
  h.payload = get_u64(in + 32);
  return h;
}

TargetLimits client_handshake(const Socket& socket, const std::string& secret, const Hello& hello,
                              const std::string& target_key, int64_t timeout_ms) {
  Deadline deadline = after_ms(timeout_ms);
  std::vector<uint8_t> msg(kHelloFixedBytes + hello.key.size() + target_key.size());
  uint8_t* p = msg.data();
  put_u32(p, kHelloMagic);
  put_u16(p + 4, kProtocolVersion);
  p[6] = uint8_t(hello.channel);
  p[7] = hello.lane;
  put_u16(p + 8, uint16_t(hello.key.size()));
  put_u16(p + 10, uint16_t(target_key.size()));
  uint8_t* client_nonce = p + 12;
  crypto::fill_random(client_nonce, kNonceBytes);
  std::memcpy(p + kHelloFixedBytes, hello.key.data(), hello.key.size());
  std::memcpy(p + kHelloFixedBytes + hello.key.size(), target_key.data(), target_key.size());
  send_all(socket, msg.data(), msg.size(), deadline, nullptr);

  uint8_t challenge[kChallengeBytes];
  recv_all(socket, challenge, sizeof(challenge), deadline, nullptr);
  if (get_u32(challenge) != kChallengeMagic) throw Error(Code::Protocol, "the target did not answer with a challenge");
  const uint8_t* server_nonce = challenge + 4;
  crypto::Digest expected = mac(secret, "mori.io server", client_nonce, server_nonce, hello.key, "");
  if (!crypto::constant_time_equal(expected.data(), challenge + 4 + kNonceBytes, expected.size())) {
    throw Error(Code::Authentication, "the target could not prove it holds engine '" + target_key + "''s secret");
  }
  TargetLimits limits;
  limits.max_frame_bytes = get_u64(challenge + 4 + kNonceBytes + 32);
  limits.max_segments = get_u32(challenge + 4 + kNonceBytes + 32 + 8);

  crypto::Digest proof = mac(secret, "mori.io client", server_nonce, client_nonce, hello.key, target_key);
  send_all(socket, proof.data(), proof.size(), deadline, nullptr);
  uint8_t verdict[4];
  recv_all(socket, verdict, sizeof(verdict), deadline, nullptr);
  if (get_u32(verdict) != kAcceptMagic) {
    throw Error(Code::Authentication, "the target rejected this engine's proof of its secret");
  }
  return clamp(limits);
}

Hello server_handshake(const Socket& socket, const std::string& secret, const std::string& own_key,
                       const TargetLimits& limits, int64_t timeout_ms, const std::atomic<bool>* stop) {
  Deadline deadline = after_ms(timeout_ms);
  uint8_t fixed[kHelloFixedBytes];
  recv_all(socket, fixed, sizeof(fixed), deadline, stop);
  if (get_u32(fixed) != kHelloMagic) throw Error(Code::Protocol, "not a mori.io HELLO");
  uint16_t version = get_u16(fixed + 4);
  if (version != kProtocolVersion) {
    throw Error(Code::Protocol, "protocol version " + std::to_string(version) + " (this engine speaks " +
                                    std::to_string(kProtocolVersion) + ")");
  }
  Hello hello;
  if (fixed[6] > uint8_t(Channel::Data)) throw Error(Code::Protocol, "unknown channel " + std::to_string(fixed[6]));
  hello.channel = Channel(fixed[6]);
  hello.lane = fixed[7];
  size_t key_len = get_u16(fixed + 8);
  size_t target_len = get_u16(fixed + 10);
  if (key_len == 0 || key_len > kMaxKeyBytes || target_len > kMaxKeyBytes) {
    throw Error(Code::Protocol, "HELLO key lengths out of bounds");
  }
  std::string keys(key_len + target_len, '\0');
  recv_all(socket, keys.data(), keys.size(), deadline, stop);
  hello.key = keys.substr(0, key_len);
  std::string target_key = keys.substr(key_len);
  const uint8_t* client_nonce = fixed + 12;

  uint8_t challenge[kChallengeBytes];
  put_u32(challenge, kChallengeMagic);
  uint8_t* server_nonce = challenge + 4;
  crypto::fill_random(server_nonce, kNonceBytes);
  crypto::Digest server_proof = mac(secret, "mori.io server", client_nonce, server_nonce, hello.key, "");
  std::memcpy(challenge + 4 + kNonceBytes, server_proof.data(), 32);
  put_u64(challenge + 4 + kNonceBytes + 32, limits.max_frame_bytes);
  put_u32(challenge + 4 + kNonceBytes + 40, limits.max_segments);
  send_all(socket, challenge, sizeof(challenge), deadline, stop);

  uint8_t proof[32];
  recv_all(socket, proof, sizeof(proof), deadline, stop);
  crypto::Digest expected = mac(secret, "mori.io client", server_nonce, client_nonce, hello.key, target_key);
  bool ok = crypto::constant_time_equal(expected.data(), proof, sizeof(proof)) && target_key == own_key;
  uint8_t verdict[4];
  put_u32(verdict, ok ? kAcceptMagic : kRejectMagic);
  send_all(socket, verdict, sizeof(verdict), deadline, stop);
  if (!ok) {
    throw Error(Code::Authentication, "peer '" + hello.key + "' did not prove it holds this engine's secret");
  }
  return hello;
}

StatusCode checked_status(uint32_t raw) {
  auto code = static_cast<StatusCode>(raw);
  if (!is_final(code) || raw > static_cast<uint32_t>(StatusCode::ERR_GPU_OP)) {
    throw Error(Code::Protocol, "response carries an invalid status code " + std::to_string(raw));
  }
  return code;
}

ControlAnswer control_round_trip(const Socket& socket, FrameType type, uint32_t mem_id, uint64_t max_payload,
                                 Deadline deadline, const std::atomic<bool>* stop) {
  FrameHeader request;
  request.type = type;
  request.mem_id = mem_id;
  request.total = 1;
  uint8_t raw[kFrameHeaderBytes];
  encode_header(request, raw);
  send_all(socket, raw, sizeof(raw), deadline, stop);
  recv_all(socket, raw, sizeof(raw), deadline, stop);
  const FrameHeader response = decode_header(raw);
  if (response.type != FrameType::Response || response.nseg > kMaxMessageBytes || response.payload > max_payload) {
    throw Error(Code::Protocol, "malformed control response");
  }
  ControlAnswer answer;
  answer.code = checked_status(response.mem_id);
  answer.message.assign(response.nseg, '\0');
  recv_all(socket, answer.message.data(), answer.message.size(), deadline, stop);
  answer.payload.assign(response.payload, '\0');
  recv_all(socket, answer.payload.data(), answer.payload.size(), deadline, stop);
  return answer;
}

}  // namespace mori::io::net
