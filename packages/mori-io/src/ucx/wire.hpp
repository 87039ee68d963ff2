// SPDX-License-Identifier: MIT
// NOTE [RDMA control messages]
// What the RDMA backend adds to mori.io's wire protocol (net/protocol.hpp), all little-endian.
// On the authenticated control connection, two requests (frames with no payload):
//   RDMA_CONNECT          -> ConnectInfo: magic "MIRC" u32, version u16, reserved u16,
//                            token[16], address_len u32, the target worker's UCP address
//   RDMA_KEY mem_id=M     -> MemoryKey:   magic "MIRK" u32, version u16, reserved u16,
//                            base u64, size u64, rkey_len u32, the packed rkey of region M
// Both answers are bounded (kMaxAddressBytes, kMaxRkeyBytes) and decoded with exact lengths; a
// target without an RDMA backend answers ERR_NOT_FOUND, an older one closes the connection.
// The token is made per initiator key on the target, which learnt that key through the
// handshake: notifications carry it, so a UCX peer that never authenticated cannot record
// inbound status under another engine's name.
// Over UCX, after a transfer's data is complete at the target, two active messages:
//   NOTIFY (initiator -> target): magic "MIRN" u32, version u16, reserved u16, token[16],
//                                 uid u64, seq u64
//   ACK    (target -> initiator): magic "MIRA" u32, version u16, code u16, seq u64
// The target records (initiator key, uid) as done before it acks, and the initiator reports
// success only on the ack, so a successful status implies the target's inbound record exists.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace mori::io::ucx::wire {

constexpr uint16_t kVersion = 1;
constexpr size_t kTokenBytes = 16;
constexpr size_t kMaxAddressBytes = 64 * 1024;
constexpr size_t kMaxRkeyBytes = 16 * 1024;
// The largest answer an initiator reads to either request.
constexpr size_t kMaxAnswerBytes = 16 + kTokenBytes + 4 + kMaxAddressBytes;

// Active message ids on mori.io's own workers (UCX sizes a table by the largest id).
constexpr unsigned kNotifyId = 0;
constexpr unsigned kAckId = 1;
constexpr size_t kNotifyBytes = 4 + 2 + 2 + kTokenBytes + 8 + 8;
constexpr size_t kAckBytes = 4 + 2 + 2 + 8;

using Token = std::array<uint8_t, kTokenBytes>;

struct ConnectInfo {
  Token token{};
  std::string address;
};

struct MemoryKey {
  uint64_t base = 0;
  uint64_t size = 0;
  std::string rkey;  // empty for an empty region
};

struct Notify {
  Token token{};
  uint64_t uid = 0;
  uint64_t seq = 0;
};

struct Ack {
  uint16_t code = 0;  // a StatusCode: SUCCESS, or why the target did not record the transfer
  uint64_t seq = 0;
};

std::string encode(const ConnectInfo& info);
std::string encode(const MemoryKey& key);
void encode(const Notify& notify, uint8_t out[kNotifyBytes]);
void encode(const Ack& ack, uint8_t out[kAckBytes]);

// Each throws Error(Protocol) for a wrong magic, version or length.
ConnectInfo decode_connect_info(const std::string& bytes);
MemoryKey decode_memory_key(const std::string& bytes);
Notify decode_notify(const void* data, size_t len);
Ack decode_ack(const void* data, size_t len);

}  // namespace mori::io::ucx::wire
