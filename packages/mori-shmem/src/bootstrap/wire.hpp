// SPDX-License-Identifier: MIT
// The bootstrap's wire format. Every message is one frame: a fixed 40-byte header, then a label
// (the `what` of a collective, or a PE's self-description in the hello), then the payload.
//   [0, 4)  magic "MRBF"       [4, 6)   kind          [6, 8)   label length (<= 255)
//   [8, 12) status / version   [12, 16) arg (rank, broadcast root)
//   [16, 24) sequence number   [24, 32) declared byte count   [32, 40) payload length
// All integers little-endian. Lengths are bounded before anything is allocated, so a confused or
// hostile peer cannot make a PE allocate or wait for gigabytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bootstrap/socket.hpp"
#include "mori_shmem/mori_shmem.h"

namespace mori::shmem::wire {

constexpr uint32_t kProtocolVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr size_t kMaxLabelBytes = 255;
// The bootstrap is a control plane (heap names, addresses); anything near this is a bug.
constexpr uint64_t kMaxPayloadBytes = uint64_t(1) << 30;
constexpr size_t kMaxReasonBytes = 16 * 1024;
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;

enum class Kind : uint16_t {
  Challenge = 1,  // root -> PE: nonce; status = root's protocol version
  Hello = 2,      // PE -> root: arg = rank, bytes = nranks, status = version, payload = MAC
  Welcome = 3,    // root -> PE: every rank has joined
  Reject = 4,     // root -> PE: status + reason; the connection is closed after it
  Abort = 5,      // root -> PE: the job failed; status + reason
  Allgather = 10,
  Broadcast = 11,  // arg = broadcast root
  Barrier = 12,
  Result = 13,  // root -> PE: the outcome of a collective
};

const char* kind_name(Kind kind);

struct Header {
  Kind kind = Kind::Abort;
  uint16_t label_len = 0;
  uint32_t status = 0;
  int32_t arg = 0;
  uint64_t seq = 0;
  uint64_t bytes = 0;
  uint64_t payload_len = 0;
};

void put_u32(uint8_t* out, uint32_t value);
uint32_t get_u32(const uint8_t* in);

void encode_header(const Header& header, uint8_t out[kHeaderBytes]);
// Throws Error(INTERNAL) naming `peer` when the bytes are not a frame header of this protocol.
Header decode_header(const uint8_t in[kHeaderBytes], const std::string& peer);

// One frame as bytes; label is truncated to kMaxLabelBytes, header.label_len/payload_len are set.
std::vector<uint8_t> encode_frame(Header header, const std::string& label, const void* payload, size_t len);

// Sends header + label + payload; large payloads go out without being copied.
void send_frame(Socket& socket, Header header, const std::string& label, const void* payload, size_t len,
                const Deadline& deadline, const std::string& what);

// Blocking receive of a header and its label; the caller then reads payload_len bytes itself
// (straight into its destination) or calls recv_reason for Abort / Reject.
Header recv_header(Socket& socket, const Deadline& deadline, const std::string& what, std::string* label);
std::string recv_reason(Socket& socket, const Header& header, const Deadline& deadline);

// Reads one frame without blocking, a piece at a time, so the root can serve many PEs from one
// poll loop and a PE that sends half a frame cannot stall it. Stops once header and label are in
// (Described) so the caller can check them before agreeing to take the payload.
class FrameReader {
 public:
  enum class Stage { Header, Label, Described, Payload, Complete };

  Stage advance(Socket& socket, const std::string& what);
  // Only in stage Described; max_payload bounds what the caller is willing to buffer.
  void accept_payload(uint64_t max_payload, const std::string& peer);
  Stage stage() const { return stage_; }
  const Header& header() const { return header_; }
  const std::string& label() const { return label_; }
  const std::vector<uint8_t>& payload() const { return payload_; }

 private:
  Stage stage_ = Stage::Header;
  uint8_t header_bytes_[kHeaderBytes] = {};
  size_t filled_ = 0;
  Header header_;
  std::string label_;
  std::vector<uint8_t> payload_;
};

}  // namespace mori::shmem::wire
