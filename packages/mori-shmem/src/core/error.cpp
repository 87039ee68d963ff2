// SPDX-License-Identifier: MIT
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace mori::shmem {

void throw_system_error(const std::string& what) {
  const int code = errno;
  throw Error(MORI_SHMEM_ERR_SYSTEM, what + ": " + std::strerror(code));
}

}  // namespace mori::shmem
