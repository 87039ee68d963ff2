// SPDX-License-Identifier: MIT
#include "ucx/wire.hpp"

#include <cstring>

#include "core/error.hpp"
#include "net/protocol.hpp"

namespace mori::io::ucx::wire {

namespace {

constexpr uint32_t kConnectMagic = 0x4352494d;  // "MIRC" read little-endian
constexpr uint32_t kKeyMagic = 0x4b52494d;      // "MIRK"
constexpr uint32_t kNotifyMagic = 0x4e52494d;   // "MIRN"
constexpr uint32_t kAckMagic = 0x4152494d;      // "MIRA"
constexpr size_t kPrefixBytes = 8;

void put_prefix(uint8_t* p, uint32_t magic, uint16_t extra) {
  net::put_u32(p, magic);
  net::put_u16(p + 4, kVersion);
  net::put_u16(p + 6, extra);
}

// Checks magic and version; returns the prefix's third field.
uint16_t check_prefix(const uint8_t* p, size_t len, uint32_t magic, size_t min_len, const char* what) {
  if (len < min_len || len < kPrefixBytes) {
    throw Error(Code::Protocol, std::string(what) + " of " + std::to_string(len) + " bytes is truncated");
  }
  if (net::get_u32(p) != magic) throw Error(Code::Protocol, std::string(what) + " has a bad magic");
  if (net::get_u16(p + 4) != kVersion) {
    throw Error(Code::Protocol, std::string(what) + " version " + std::to_string(net::get_u16(p + 4)) +
                                    " (this engine speaks " + std::to_string(kVersion) + ")");
  }
  return net::get_u16(p + 6);
}

}  // namespace

std::string encode(const ConnectInfo& info) {
  std::string out(kPrefixBytes + kTokenBytes + 4 + info.address.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  put_prefix(p, kConnectMagic, 0);
  std::memcpy(p + kPrefixBytes, info.token.data(), kTokenBytes);
  net::put_u32(p + kPrefixBytes + kTokenBytes, static_cast<uint32_t>(info.address.size()));
  std::memcpy(p + kPrefixBytes + kTokenBytes + 4, info.address.data(), info.address.size());
  return out;
}

ConnectInfo decode_connect_info(const std::string& bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t fixed = kPrefixBytes + kTokenBytes + 4;
  check_prefix(p, bytes.size(), kConnectMagic, fixed, "RDMA connect info");
  const size_t len = net::get_u32(p + kPrefixBytes + kTokenBytes);
  if (len == 0 || len > kMaxAddressBytes) {
    throw Error(Code::Protocol, "RDMA worker address of " + std::to_string(len) + " bytes (limit " +
                                    std::to_string(kMaxAddressBytes) + ")");
  }
  if (bytes.size() != fixed + len) throw Error(Code::Protocol, "RDMA connect info has the wrong length");
  ConnectInfo info;
  std::memcpy(info.token.data(), p + kPrefixBytes, kTokenBytes);
  info.address.assign(bytes, fixed, len);
  return info;
}

std::string encode(const MemoryKey& key) {
  std::string out(kPrefixBytes + 16 + 4 + key.rkey.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  put_prefix(p, kKeyMagic, 0);
  net::put_u64(p + kPrefixBytes, key.base);
  net::put_u64(p + kPrefixBytes + 8, key.size);
  net::put_u32(p + kPrefixBytes + 16, static_cast<uint32_t>(key.rkey.size()));
  std::memcpy(p + kPrefixBytes + 20, key.rkey.data(), key.rkey.size());
  return out;
}

MemoryKey decode_memory_key(const std::string& bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t fixed = kPrefixBytes + 20;
  check_prefix(p, bytes.size(), kKeyMagic, fixed, "RDMA memory key");
  MemoryKey key;
  key.base = net::get_u64(p + kPrefixBytes);
  key.size = net::get_u64(p + kPrefixBytes + 8);
  const size_t len = net::get_u32(p + kPrefixBytes + 16);
  if (len > kMaxRkeyBytes) {
    throw Error(Code::Protocol, "RDMA rkey of " + std::to_string(len) + " bytes (limit " +
                                    std::to_string(kMaxRkeyBytes) + ")");
  }
  if (bytes.size() != fixed + len) throw Error(Code::Protocol, "RDMA memory key has the wrong length");
  if ((len == 0) != (key.size == 0)) throw Error(Code::Protocol, "RDMA memory key without an rkey");
  if (key.size != 0 && key.base > UINT64_MAX - key.size) throw Error(Code::Protocol, "RDMA region wraps around");
  key.rkey.assign(bytes, fixed, len);
  return key;
}

void encode(const Notify& notify, uint8_t out[kNotifyBytes]) {
  put_prefix(out, kNotifyMagic, 0);
  std::memcpy(out + kPrefixBytes, notify.token.data(), kTokenBytes);
  net::put_u64(out + kPrefixBytes + kTokenBytes, notify.uid);
  net::put_u64(out + kPrefixBytes + kTokenBytes + 8, notify.seq);
}

Notify decode_notify(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  check_prefix(p, len, kNotifyMagic, kNotifyBytes, "RDMA notification");
  if (len != kNotifyBytes) throw Error(Code::Protocol, "RDMA notification has the wrong length");
  Notify notify;
  std::memcpy(notify.token.data(), p + kPrefixBytes, kTokenBytes);
  notify.uid = net::get_u64(p + kPrefixBytes + kTokenBytes);
  notify.seq = net::get_u64(p + kPrefixBytes + kTokenBytes + 8);
  return notify;
}

void encode(const Ack& ack, uint8_t out[kAckBytes]) {
  put_prefix(out, kAckMagic, ack.code);
  net::put_u64(out + kPrefixBytes, ack.seq);
}

Ack decode_ack(const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  Ack ack;
  ack.code = check_prefix(p, len, kAckMagic, kAckBytes, "RDMA acknowledgement");
  if (len != kAckBytes) throw Error(Code::Protocol, "RDMA acknowledgement has the wrong length");
  ack.seq = net::get_u64(p + kPrefixBytes);
  return ack;
}

}  // namespace mori::io::ucx::wire
