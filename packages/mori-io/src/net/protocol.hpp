// SPDX-License-Identifier: MIT
// NOTE [mori.io wire protocol, version 1]
// Every connection goes initiator -> target port and starts with a mutual HMAC-SHA-256 handshake
// over the target engine's secret (the secret travels in its EngineDesc):
//   C: HELLO  magic "MIOH", version u16, channel u8 (0 control, 1 data), lane u8,
//             key_len u16, target_key_len u16, client_nonce[32], key, target_key
//   S: CHALLENGE magic "MIOC", server_nonce[32], HMAC(secret, "server"|cn|sn|key),
//             max_frame_bytes u64, max_segments u32
//   C: PROOF  HMAC(secret, "client"|sn|cn|key|target_key)
//   S: VERDICT magic "MIOK" (then the connection is live) or "MION" (then it is closed)
// After that each connection carries frames with a fixed 40-byte little-endian header:
//   magic "MIOF" u32, type u8, flags u8, reserved u16, uid u64, seq u32, total u32,
//   mem_id u32, nseg u32, payload u64
// WRITE and READ requests carry nseg (offset u64, size u64) pairs after the header, then (WRITE)
// `payload` bytes, the segments' data in order. A transfer is cut into `total` frames numbered by
// `seq`; the target counts them to report inbound completion of (initiator key, uid).
// RESPONSE echoes uid/seq/total, puts the status code in mem_id, the message length in nseg and
// the number of data bytes that follow the message (READ) in payload. A connection answers its
// frames in order, so the initiator matches responses to requests by position (uid and seq are
// checked as well). Any header that breaks a bound closes the connection; a request that names
// memory out of range gets an error response and its payload, already bounded, is discarded.
// RDMA_CONNECT and RDMA_KEY (mem_id) carry no payload; their answers are the RDMA backend's
// (NOTE [RDMA control messages] in ucx/wire.hpp). They were added to version 1 without a version
// bump: a target that predates them closes the connection, which the initiator takes as "no
// RDMA there".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.hpp"
#include "net/socket.hpp"

namespace mori::io::net {

constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kFrameHeaderBytes = 40;
constexpr size_t kSegmentBytes = 16;
constexpr size_t kMaxKeyBytes = 1024;
constexpr size_t kMaxMessageBytes = 4096;

enum class Channel : uint8_t { Control = 0, Data = 1 };

enum class FrameType : uint8_t {
  Write = 1,
  Read = 2,
  Response = 3,
  MemQuery = 4,
  Ping = 5,
  RdmaConnect = 6,
  RdmaKey = 7,
};

struct FrameHeader {
  FrameType type = FrameType::Write;
  uint8_t flags = 0;
  uint64_t uid = 0;
  uint32_t seq = 0;
  uint32_t total = 0;
  uint32_t mem_id = 0;
  uint32_t nseg = 0;
  uint64_t payload = 0;
};

void encode_header(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);
// Throws Error(Protocol) on a bad magic or an unknown type.
FrameHeader decode_header(const uint8_t in[kFrameHeaderBytes]);

// Little-endian integers of the wire format, whatever the host's byte order.
template <typename T>
inline void put_le(uint8_t* p, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = uint8_t(v >> (8 * i));
}
template <typename T>
inline T get_le(const uint8_t* p) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v = T(v | (T(p[i]) << (8 * i)));
  return v;
}
inline void put_u64(uint8_t* p, uint64_t v) { put_le(p, v); }
inline uint64_t get_u64(const uint8_t* p) { return get_le<uint64_t>(p); }
inline void put_u32(uint8_t* p, uint32_t v) { put_le(p, v); }
inline uint32_t get_u32(const uint8_t* p) { return get_le<uint32_t>(p); }
inline void put_u16(uint8_t* p, uint16_t v) { put_le(p, v); }
inline uint16_t get_u16(const uint8_t* p) { return get_le<uint16_t>(p); }

// What the target announces in its CHALLENGE: the initiator sizes its frames by these, clamped to
// [kMinFrameBytes, kMaxFrameBytes] and [kMinSegments, kMaxSegments]: a target announcing a tiny
// frame would otherwise make the initiator build (and allocate for) a frame per few bytes, and a
// huge one would let it ask for frames no initiator should buffer. A target that really accepts
// less than the floor closes the connection on the first bigger frame: its transfers fail.
constexpr uint64_t kMinFrameBytes = 64 * 1024;
constexpr uint64_t kMaxFrameBytes = 1ull << 30;
constexpr uint32_t kMinSegments = 64;
constexpr uint32_t kMaxSegments = 1u << 20;

struct TargetLimits {
  uint64_t max_frame_bytes = 0;
  uint32_t max_segments = 0;
};

// The announced limits within the floors and ceilings above.
TargetLimits clamp(TargetLimits announced);

struct Hello {
  Channel channel = Channel::Data;
  uint8_t lane = 0;
  std::string key;  // the initiator's engine key
};

// Initiator side. Throws Error(Authentication) when the target cannot prove the secret or rejects
// ours, Error(Connection/Timeout/Protocol) otherwise.
TargetLimits client_handshake(const Socket& socket, const std::string& secret, const Hello& hello,
                              const std::string& target_key, int64_t timeout_ms);

// Target side: the peer's HELLO once it proved the secret. Throws on any failure; the caller
// closes the socket.
Hello server_handshake(const Socket& socket, const std::string& secret, const std::string& own_key,
                       const TargetLimits& limits, int64_t timeout_ms, const std::atomic<bool>* stop);

// The status a response frame carries (its mem_id field); anything but a final status is a
// protocol error.
StatusCode checked_status(uint32_t raw);

// The answer to a one-frame control request (MemQuery, Ping, an RDMA request).
struct ControlAnswer {
  StatusCode code = StatusCode::SUCCESS;
  std::string message;
  std::string payload;  // at most the caller's max_payload bytes
};

// Sends a control request (type, mem_id) on `socket` and reads its answer, all by `deadline`; an
// answer that is not a response, or whose message or payload exceed kMaxMessageBytes /
// max_payload, or whose status is not final, is Error(Protocol). The caller serialises requests
// on the socket.
ControlAnswer control_round_trip(const Socket& socket, FrameType type, uint32_t mem_id, uint64_t max_payload,
                                 Deadline deadline, const std::atomic<bool>* stop);

}  // namespace mori::io::net
