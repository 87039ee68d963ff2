// SPDX-License-Identifier: MIT
// SHA-256 / HMAC-SHA-256 and a CSPRNG read, just enough for the peer handshake. The hashing and
// the constant-time compare are the shared <mori/hmac_sha256.hpp> of the root package
// (mori.get_include()), kept in-tree so the wheel has no OpenSSL dependency; this adds the CSPRNG
// read that raises mori-io's error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mori/hmac_sha256.hpp>

namespace mori::io::crypto {

using Digest = ::mori::common::Sha256Digest;
using ::mori::common::constant_time_equal;  // no early exit: a forged MAC cannot be found byte by byte
using ::mori::common::hmac_sha256;

// getrandom(2); throws Error(SYSTEM) when the kernel cannot provide entropy.
void fill_random(uint8_t* out, size_t len);

}  // namespace mori::io::crypto
