// SPDX-License-Identifier: MIT
#pragma once

#include <sstream>

namespace mori::shmem {

template <typename... Parts>
[[noreturn]] void throw_error(mori_shmem_status_t status, Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  throw Error(status, out.str());
}

}  // namespace mori::shmem
