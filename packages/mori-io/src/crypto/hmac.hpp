// SPDX-License-Identifier: MIT
// SHA-256 / HMAC-SHA-256 and a CSPRNG read, just enough for the peer handshake. Kept in-tree so
// the wheel has no OpenSSL dependency (ABI churn across distributions) for one MAC per connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace mori::io::crypto {

using Digest = std::array<uint8_t, 32>;

Digest sha256(const uint8_t* data, size_t len);
Digest hmac_sha256(const std::string& key, const uint8_t* msg, size_t len);

// No early exit, so a forged MAC cannot be found byte by byte through timing.
bool equal_constant_time(const uint8_t* a, const uint8_t* b, size_t len);

// getrandom(2); throws Error(SYSTEM) when the kernel cannot provide entropy.
void fill_random(uint8_t* out, size_t len);

}  // namespace mori::io::crypto
