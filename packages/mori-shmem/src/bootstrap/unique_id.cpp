// SPDX-License-Identifier: MIT
// The 128-byte unique id (all integers little-endian unless noted):
//   [0, 8)     magic "MORIUID1"
//   [8, 12)    bootstrap protocol version
//   [12, 16)   IPv4 address of the root, network byte order
//   [16, 18)   port of the root, network byte order
//   [18, 20)   zero
//   [20, 52)   job secret
//   [52, 120)  zero (reserved: a later version may use it, so decode insists on zero today)
//   [120, 128) first 8 bytes of SHA-256 over [0, 120): catches ids truncated or mangled in transit
// (they travel as pickled bytes through torch.distributed / mpi4py / files).
#include <arpa/inet.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/hmac_sha256.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/unique_id_registry.hpp"
#include "core/env.hpp"
#include "core/error.hpp"

namespace mori::shmem {

namespace {

// Bumped whenever the rendezvous protocol changes, so PEs of different builds refuse each other.
constexpr uint32_t kProtocolVersion = 1;

void put_u32(uint8_t* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(value >> (8 * i));
}

uint32_t get_u32(const uint8_t* in) {
  return uint32_t(in[0]) | (uint32_t(in[1]) << 8) | (uint32_t(in[2]) << 16) | (uint32_t(in[3]) << 24);
}

constexpr char kMagic[8] = {'M', 'O', 'R', 'I', 'U', 'I', 'D', '1'};
constexpr size_t kVersionOffset = 8;
constexpr size_t kAddressOffset = 12;
constexpr size_t kPortOffset = 16;
constexpr size_t kSecretOffset = 20;
constexpr size_t kReservedOffset = kSecretOffset + kSecretBytes;
constexpr size_t kChecksumOffset = 120;
constexpr size_t kChecksumBytes = 8;
static_assert(kReservedOffset <= kChecksumOffset, "unique id fields overflow");
static_assert(kChecksumOffset + kChecksumBytes == MORI_SHMEM_UNIQUE_ID_BYTES, "unique id size");

void checksum(const uint8_t* bytes, uint8_t out[kChecksumBytes]) {
  const Sha256Digest digest = sha256(bytes, kChecksumOffset);
  std::memcpy(out, digest.data(), kChecksumBytes);
}

struct Reservation {
  uint16_t port;
  Secret secret;
};

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<Reservation>& registry() {
  static std::vector<Reservation> entries;
  return entries;
}

// A process that makes ids in a loop must not grow without bound; old ids are long used.
constexpr size_t kMaxRemembered = 256;

}  // namespace

void remember_unique_id(uint16_t port, const Secret& secret) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& entries = registry();
  if (entries.size() >= kMaxRemembered) entries.erase(entries.begin());
  entries.push_back(Reservation{port, secret});
}

bool unique_id_made_here(uint16_t port, const Secret& secret) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& entry : registry()) {
    if (entry.port == port && constant_time_equal(entry.secret.data(), secret.data(), kSecretBytes)) return true;
  }
  return false;
}

void encode_unique_id(const UniqueIdFields& fields, mori_shmem_uniqueid_t* out) {
  if (out == nullptr) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "unique id output pointer is NULL");
  in_addr address{};
  if (inet_pton(AF_INET, fields.host.c_str(), &address) != 1) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "unique id host '", fields.host, "' is not a dotted IPv4 address");
  }
  if (fields.port == 0) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "unique id port must not be 0");
  uint8_t bytes[MORI_SHMEM_UNIQUE_ID_BYTES] = {};
  std::memcpy(bytes, kMagic, sizeof(kMagic));
  put_u32(bytes + kVersionOffset, fields.protocol_version);
  std::memcpy(bytes + kAddressOffset, &address.s_addr, 4);
  bytes[kPortOffset] = uint8_t(fields.port >> 8);
  bytes[kPortOffset + 1] = uint8_t(fields.port);
  std::memcpy(bytes + kSecretOffset, fields.secret.data(), kSecretBytes);
  checksum(bytes, bytes + kChecksumOffset);
  std::memcpy(out->internal, bytes, sizeof(bytes));
}

UniqueIdFields decode_unique_id(const mori_shmem_uniqueid_t& uid) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(uid.internal);
  if (std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT,
                "not a mori-shmem unique id (bad magic): it must be the bytes produced by get_unique_id");
  }
  UniqueIdFields fields;
  // Version before checksum: an id from a newer library may lay out the rest differently, and
  // "version 2, this library speaks 1" is the useful message then.
  fields.protocol_version = get_u32(bytes + kVersionOffset);
  if (fields.protocol_version != kProtocolVersion) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "unique id has bootstrap protocol version ", fields.protocol_version,
                " but this libmori_shmem speaks version ", kProtocolVersion,
                "; all PEs must run the same mori-shmem release");
  }
  uint8_t expected[kChecksumBytes];
  checksum(bytes, expected);
  if (std::memcmp(expected, bytes + kChecksumOffset, kChecksumBytes) != 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT,
                "unique id is corrupted (checksum mismatch): it was altered or truncated on its way to this PE");
  }
  bool reserved_zero = bytes[kPortOffset + 2] == 0 && bytes[kPortOffset + 3] == 0;
  for (size_t i = kReservedOffset; i < kChecksumOffset; ++i) reserved_zero = reserved_zero && bytes[i] == 0;
  if (!reserved_zero) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT,
                "unique id has non-zero reserved bytes (made by an incompatible mori-shmem?)");
  }
  in_addr address{};
  std::memcpy(&address.s_addr, bytes + kAddressOffset, 4);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address, text, sizeof(text));
  fields.host = text;
  fields.port = uint16_t((uint16_t(bytes[kPortOffset]) << 8) | bytes[kPortOffset + 1]);
  if (address.s_addr == htonl(INADDR_ANY) || address.s_addr == htonl(INADDR_BROADCAST) || fields.port == 0) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "unique id has a malformed root address ", fields.host, ":",
                fields.port);
  }
  std::memcpy(fields.secret.data(), bytes + kSecretOffset, kSecretBytes);
  return fields;
}

// NOTE [unique id port]
// create_unique_id only probes for a free port: it binds, reads the port and closes the socket at
// once. Holding it would be wrong whenever rank 0 is another process (a launcher that makes the id
// and spawns the PEs): a listener parked in the launcher would either make rank 0's bind fail or,
// with SO_REUSEPORT, steal the PEs' connections. So rank 0 binds the port itself (SO_REUSEADDR)
// when it joins, in whatever process it runs. Between the two the port is free and another program
// could take it; rank 0 then fails with Error(SYSTEM) asking for a new unique id. The window is
// small because the kernel hands out ephemeral ports round-robin.
void create_unique_id(mori_shmem_uniqueid_t* out) {
  if (out == nullptr) throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "unique id output pointer is NULL");
  UniqueIdFields fields;
  fields.protocol_version = kProtocolVersion;
  fields.host = interface_ipv4(env::get_string("MORI_SOCKET_IFNAME"));
  {
    Socket probe = listen_tcp(fields.host, 0, /*reuse_addr=*/false, /*backlog=*/1);
    fields.port = local_port(probe);
  }
  random_bytes(fields.secret.data(), fields.secret.size());
  remember_unique_id(fields.port, fields.secret);
  encode_unique_id(fields, out);
}

}  // namespace mori::shmem
