// SPDX-License-Identifier: MIT
// NOTE [remote wire]
// The messages of the remote transport, between a PE (the initiator) and the conduit server of
// the PE whose heap it targets. Every message starts with a fixed 48-byte Request; PUT and
// PUT_SIGNAL are followed by `length` payload bytes. Addresses are heap offsets, never pointers:
// the server checks each range against its heap and drops the connection on the first request
// that does not fit, so a peer can never make it read or write outside the heap.
// PUT, PUT_SIGNAL(_PART) and SIGNAL are not answered (they pipeline); GET, AMO and FLUSH are, in order.
// A connection is served by one thread, in order, so FLUSH's answer means every request sent
// before it on that connection has been applied.
#pragma once

#include <cstdint>

namespace mori::shmem::remote {

constexpr uint16_t kWireMagic = 0x4d52;  // "MR"
constexpr uint32_t kWireVersion = 2;  // 2: PUT_SIGNAL_PART

enum class Op : uint8_t {
  Put = 1,        // payload -> heap[offset, offset+length)
  PutSignal = 2,  // as Put, then the signal word at signal_offset gets `value` (amo = SIGNAL_SET/ADD), release
  Signal = 3,     // signal word at offset gets `value` by `amo`
  Get = 4,        // answer: Reply, then heap[offset, offset+length)
  Amo = 5,        // atomic `amo` of integer `type` at offset; answer: Reply with the old value
  Flush = 6,      // answer: Reply once everything before it on this connection is applied
  // As Put; `compare` = join id << 8 | parts: once all `parts` parts of that join from this PE are
  // applied (on any of its connections), the signal word at signal_offset gets `value` by `amo`
  // (NOTE [striped put-with-signal] in signal_joins.hpp).
  PutSignalPart = 7,
};

#pragma pack(push, 1)
struct Request {
  uint16_t magic;
  uint8_t op;
  uint8_t type;  // integer type code of Amo (MORI_SHMEM_TYPE_*)
  int32_t amo;   // MORI_SHMEM_AMO_* of Amo, MORI_SHMEM_SIGNAL_* of PutSignal / Signal
  uint64_t offset;
  uint64_t length;
  uint64_t value;
  uint64_t compare;
  uint64_t signal_offset;
};

struct Reply {
  uint32_t status;  // 0, or a mori_shmem_status_t the server hit (then the connection closes)
  uint32_t reserved;
  uint64_t value;
};

// The first bytes each side sends after connecting: who it is, and proof of the job secret.
struct Hello {
  uint32_t version;
  int32_t rank;     // the initiator's PE
  int32_t target;   // the PE it believes it reached
  int32_t stream;   // which of the initiator's streams to that PE this is
  uint8_t mac[32];  // HMAC-SHA256(secret, server nonce || version || rank || target || stream)
};
#pragma pack(pop)

static_assert(sizeof(Request) == 48, "wire Request is 48 bytes");
static_assert(sizeof(Reply) == 16, "wire Reply is 16 bytes");

}  // namespace mori::shmem::remote
