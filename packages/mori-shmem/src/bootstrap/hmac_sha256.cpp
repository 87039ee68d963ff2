// SPDX-License-Identifier: MIT
#include "bootstrap/hmac_sha256.hpp"

#include <cerrno>

#include "core/error.hpp"

namespace mori::shmem {

void random_bytes(uint8_t* out, size_t len) {
  if (const int error = ::mori::common::fill_random(out, len); error != 0) {
    errno = error;
    throw_system_error("getrandom");
  }
}

}  // namespace mori::shmem
