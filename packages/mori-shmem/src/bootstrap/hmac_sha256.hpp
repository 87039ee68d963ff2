// SPDX-License-Identifier: MIT
// The few cryptographic primitives the bootstrap needs to let PEs prove they hold the job secret.
// Self-contained so that libmori_shmem does not pull in OpenSSL (ABI and licensing churn) for
// one MAC per connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace mori::shmem {

using Sha256Digest = std::array<uint8_t, 32>;

// FIPS 180-4 SHA-256, fed incrementally so HMAC can hash key pad and message without a copy.
class Sha256 {
 public:
  Sha256();
  void update(const uint8_t* data, size_t len);
  Sha256Digest finish();

 private:
  void compress(const uint8_t block[64]);
  uint32_t state_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(const uint8_t* data, size_t len);

// RFC 2104 HMAC over SHA-256.
Sha256Digest hmac_sha256(const uint8_t* key, size_t key_len, const uint8_t* msg, size_t len);

// Compares without an early exit, so the time taken does not reveal how many leading bytes of a
// forged MAC were right.
bool constant_time_equal(const uint8_t* a, const uint8_t* b, size_t len);

// Fills out with bytes from the kernel CSPRNG (getrandom(2)); throws Error(SYSTEM) if it cannot.
void random_bytes(uint8_t* out, size_t len);

}  // namespace mori::shmem
