// SPDX-License-Identifier: MIT
#include "bootstrap/wire.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace mori::shmem::wire {

namespace {

constexpr uint32_t kFrameMagic = 0x4642524d;  // "MRBF" in little-endian byte order
// Frames up to this size are sent as one buffer so that a small frame is one TCP segment.
constexpr size_t kCoalesceBytes = 64 * 1024;

void put_u16(uint8_t* out, uint16_t value) {
  out[0] = uint8_t(value);
  out[1] = uint8_t(value >> 8);
}

uint16_t get_u16(const uint8_t* in) { return uint16_t(in[0] | (uint16_t(in[1]) << 8)); }

void put_u64(uint8_t* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(value >> (8 * i));
}

uint64_t get_u64(const uint8_t* in) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t(in[i]) << (8 * i);
  return value;
}

bool known_kind(uint16_t kind) {
  switch (Kind(kind)) {
    case Kind::Challenge:
    case Kind::Hello:
    case Kind::Welcome:
    case Kind::Reject:
    case Kind::Abort:
    case Kind::Allgather:
    case Kind::Broadcast:
    case Kind::Barrier:
    case Kind::Result:
      return true;
  }
  return false;
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Challenge: return "challenge";
    case Kind::Hello: return "hello";
    case Kind::Welcome: return "welcome";
    case Kind::Reject: return "reject";
    case Kind::Abort: return "abort";
    case Kind::Allgather: return "allgather";
    case Kind::Broadcast: return "broadcast";
    case Kind::Barrier: return "barrier";
    case Kind::Result: return "result";
  }
  return "unknown";
}

void put_u32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(value >> (8 * i));
}

uint32_t get_u32(const uint8_t* in) {
  return uint32_t(in[0]) | (uint32_t(in[1]) << 8) | (uint32_t(in[2]) << 16) | (uint32_t(in[3]) << 24);
}

void encode_header(const Header& header, uint8_t out[kHeaderBytes]) {
  put_u32(out, kFrameMagic);
  put_u16(out + 4, uint16_t(header.kind));
  put_u16(out + 6, header.label_len);
  put_u32(out + 8, header.status);
  put_u32(out + 12, uint32_t(header.arg));
  put_u64(out + 16, header.seq);
  put_u64(out + 24, header.bytes);
  put_u64(out + 32, header.payload_len);
}

Header decode_header(const uint8_t in[kHeaderBytes], const std::string& peer) {
  if (get_u32(in) != kFrameMagic) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap frame from ", peer,
                " (bad magic: not a mori-shmem PE, or a different protocol version)");
  }
  const uint16_t kind = get_u16(in + 4);
  if (!known_kind(kind)) throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap frame from ", peer, " (kind ", kind, ")");
  Header header;
  header.kind = Kind(kind);
  header.label_len = get_u16(in + 6);
  header.status = get_u32(in + 8);
  header.arg = int32_t(get_u32(in + 12));
  header.seq = get_u64(in + 16);
  header.bytes = get_u64(in + 24);
  header.payload_len = get_u64(in + 32);
  if (header.label_len > kMaxLabelBytes) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap frame from ", peer, " (label of ", header.label_len,
                " bytes, limit ", kMaxLabelBytes, ")");
  }
  if (header.payload_len > kMaxPayloadBytes) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap frame from ", peer, " (payload of ",
                header.payload_len, " bytes, limit ", kMaxPayloadBytes, ")");
  }
  return header;
}

std::vector<uint8_t> encode_frame(Header header, const std::string& label, const void* payload, size_t len) {
  const size_t label_len = std::min(label.size(), kMaxLabelBytes);
  header.label_len = uint16_t(label_len);
  header.payload_len = len;
  std::vector<uint8_t> frame(kHeaderBytes + label_len + len);
  encode_header(header, frame.data());
  std::memcpy(frame.data() + kHeaderBytes, label.data(), label_len);
  if (len > 0) std::memcpy(frame.data() + kHeaderBytes + label_len, payload, len);
  return frame;
}

void send_frame(Socket& socket, Header header, const std::string& label, const void* payload, size_t len,
                const Deadline& deadline, const std::string& what) {
  if (len <= kCoalesceBytes) {
    const std::vector<uint8_t> frame = encode_frame(header, label, payload, len);
    socket.send_all(frame.data(), frame.size(), deadline, what);
    return;
  }
  std::vector<uint8_t> head = encode_frame(header, label, nullptr, 0);
  header.label_len = uint16_t(head.size() - kHeaderBytes);
  header.payload_len = len;  // re-encoded: the payload follows separately, uncopied
  encode_header(header, head.data());
  socket.send_all(head.data(), head.size(), deadline, what);
  socket.send_all(payload, len, deadline, what);
}

Header recv_header(Socket& socket, const Deadline& deadline, const std::string& what, std::string* label) {
  uint8_t bytes[kHeaderBytes];
  socket.recv_all(bytes, kHeaderBytes, deadline, what);
  const Header header = decode_header(bytes, socket.peer());
  label->assign(header.label_len, '\0');
  socket.recv_all(label->data(), header.label_len, deadline, what);
  return header;
}

std::string recv_reason(Socket& socket, const Header& header, const Deadline& deadline) {
  if (header.payload_len > kMaxReasonBytes) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "malformed bootstrap frame from ", socket.peer(), " (", kind_name(header.kind),
                " reason of ", header.payload_len, " bytes)");
  }
  std::string reason(size_t(header.payload_len), '\0');
  socket.recv_all(reason.data(), reason.size(), deadline, std::string("the reason of the ") + kind_name(header.kind));
  return reason;
}

FrameReader::Stage FrameReader::advance(Socket& socket, const std::string& what) {
  for (;;) {
    switch (stage_) {
      case Stage::Header: {
        const size_t n = socket.recv_some(header_bytes_ + filled_, kHeaderBytes - filled_, what);
        filled_ += n;
        if (filled_ < kHeaderBytes) return stage_;
        header_ = decode_header(header_bytes_, socket.peer());
        label_.clear();
        stage_ = header_.label_len == 0 ? Stage::Described : Stage::Label;
        break;
      }
      case Stage::Label: {
        char chunk[kMaxLabelBytes];
        const size_t n = socket.recv_some(chunk, header_.label_len - label_.size(), what);
        label_.append(chunk, n);
        if (label_.size() < header_.label_len) return stage_;
        stage_ = Stage::Described;
        break;
      }
      case Stage::Described:
      case Stage::Complete:
        return stage_;
      case Stage::Payload: {
        if (filled_ < payload_.size()) {
          filled_ += socket.recv_some(payload_.data() + filled_, payload_.size() - filled_, what);
        }
        if (filled_ < payload_.size()) return stage_;
        stage_ = Stage::Complete;
        return stage_;
      }
    }
  }
}

void FrameReader::accept_payload(uint64_t max_payload, const std::string& peer) {
  if (header_.payload_len > max_payload) {
    throw_error(MORI_SHMEM_ERR_INTERNAL, "bootstrap frame from ", peer, " carries ", header_.payload_len,
                " bytes, more than the ", max_payload, " expected");
  }
  payload_.assign(size_t(header_.payload_len), 0);
  filled_ = 0;
  stage_ = Stage::Payload;
}

}  // namespace mori::shmem::wire
