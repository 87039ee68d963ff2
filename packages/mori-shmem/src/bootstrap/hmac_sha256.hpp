// SPDX-License-Identifier: MIT
// The few cryptographic primitives the bootstrap needs to let PEs prove they hold the job secret:
// SHA-256, HMAC-SHA-256 and the constant-time compare are the shared <mori/hmac_sha256.hpp> of the
// root package (mori.get_include()); this adds the CSPRNG read that raises mori-shmem's error.
#pragma once

#include <mori/hmac_sha256.hpp>

namespace mori::shmem {

using ::mori::common::constant_time_equal;
using ::mori::common::hmac_sha256;
using ::mori::common::sha256;
using ::mori::common::Sha256Digest;

// Fills out with bytes from the kernel CSPRNG (getrandom(2)); throws Error(SYSTEM) if it cannot.
void random_bytes(uint8_t* out, size_t len);

}  // namespace mori::shmem
