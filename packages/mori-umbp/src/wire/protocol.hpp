// SPDX-License-Identifier: MIT
// NOTE [wire] (mori/umbp/wire.py) in bytes: the handshake that proves the pool secret both ways,
// and the frames each direction MACs under its own key. Python's side of the protocol (the
// constants the tests craft frames with) and this one must agree byte for byte.
#pragma once

#include <mori/hmac_sha256.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace mori::umbp::wire {

using ::mori::common::Sha256;
using Digest = ::mori::common::Sha256Digest;

inline constexpr char kMagic[] = "UMBPW1";
inline constexpr size_t kMagicBytes = sizeof(kMagic) - 1;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kTagBytes = 32;
inline constexpr size_t kMaxNodeIdBytes = 1024;
inline constexpr size_t kMaxFrameBytes = size_t(4) << 20;
inline constexpr size_t kMaxHandshakes = 16;
inline constexpr uint8_t kOk = 1;
inline constexpr uint8_t kRefused = 0;
// Request: body length (u32), sequence (u64), method name length (u8); answer: body length,
// sequence, status (u8). Little endian, packed: Python's struct "<IQB".
inline constexpr size_t kHeaderBytes = 13;

struct Header {
  uint32_t size = 0;
  uint64_t seq = 0;
  uint8_t last = 0;  // the name's length in a request, the status in an answer
};

inline void pack(const Header& h, uint8_t* out) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(h.size >> (8 * i));
  for (int i = 0; i < 8; ++i) out[4 + i] = uint8_t(h.seq >> (8 * i));
  out[12] = h.last;
}

inline Header unpack(const uint8_t* in) {
  Header h;
  for (int i = 0; i < 4; ++i) h.size |= uint32_t(in[i]) << (8 * i);
  for (int i = 0; i < 8; ++i) h.seq |= uint64_t(in[4 + i]) << (8 * i);
  h.last = in[12];
  return h;
}

// A frame's MAC over its parts, keyed once per connection direction (the root package's
// HmacSha256, which starts each message from the padded key's states).
class KeyedMac {
 public:
  KeyedMac() : mac_(nullptr, 0) {}
  explicit KeyedMac(std::string_view key) : mac_(reinterpret_cast<const uint8_t*>(key.data()), key.size()) {}

  struct Parts {
    const void* data;
    size_t size;
  };
  template <size_t N>
  Digest over(const Parts (&parts)[N]) const {
    Sha256 message = mac_.begin();
    for (const Parts& p : parts) message.update(static_cast<const uint8_t*>(p.data), p.size);
    return mac_.finish(message);
  }

 private:
  ::mori::common::HmacSha256 mac_;
};

// HMAC(secret, label || s_nonce || c_nonce || node): the handshake's proofs and the frame keys.
inline Digest handshake_mac(std::string_view secret, std::string_view label, const uint8_t* s_nonce,
                            const uint8_t* c_nonce, std::string_view node) {
  return KeyedMac(secret).over({{label.data(), label.size()},
                                {s_nonce, kNonceBytes},
                                {c_nonce, kNonceBytes},
                                {node.data(), node.size()}});
}

inline std::string_view as_view(const Digest& d) { return {reinterpret_cast<const char*>(d.data()), d.size()}; }

// The two frame keys of one connection: caller to server, server to caller.
struct FrameKeys {
  KeyedMac c2s;
  KeyedMac s2c;
};

inline FrameKeys frame_keys(std::string_view secret, const uint8_t* s_nonce, const uint8_t* c_nonce,
                            std::string_view node) {
  return {KeyedMac(as_view(handshake_mac(secret, "c2s", s_nonce, c_nonce, node))),
          KeyedMac(as_view(handshake_mac(secret, "s2c", s_nonce, c_nonce, node)))};
}

}  // namespace mori::umbp::wire
