// SPDX-License-Identifier: MIT
#include "crypto/hmac.hpp"

#include <cstring>
#include <string>

#include "core/error.hpp"

namespace mori::io::crypto {

void fill_random(uint8_t* out, size_t len) {
  if (const int error = ::mori::common::fill_random(out, len); error != 0) {
    throw Error(Code::System, std::string("getrandom failed: ") + std::strerror(error));
  }
}

}  // namespace mori::io::crypto
