// SPDX-License-Identifier: MIT
#include "core/error.hpp"

#include <cerrno>
#include <cstring>

namespace mori::cco {

void fail_errno(const std::string& what) {
  const int code = errno;
  fail(code == ENOSPC || code == ENOMEM ? ccoOutOfMemory : ccoSystemError, what, ": ", std::strerror(code));
}

}  // namespace mori::cco
