// SPDX-License-Identifier: MIT
// Errors inside libmori_shmem are C++ exceptions carrying a mori_shmem_status_t; the C ABI layer
// (c_api.cpp) turns them into a return code plus a thread-local message.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "mori_shmem/mori_shmem.h"

namespace mori::shmem {

class Error : public std::runtime_error {
 public:
  Error(mori_shmem_status_t status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  mori_shmem_status_t status() const noexcept { return status_; }

 private:
  mori_shmem_status_t status_;
};

// Builds a message from streamable parts: throw_error(ERR, "size ", n, " exceeds ", limit).
template <typename... Parts>
[[noreturn]] void throw_error(mori_shmem_status_t status, Parts&&... parts);

// errno-carrying variant for failed system calls: "<what>: <strerror(errno)>".
[[noreturn]] void throw_system_error(const std::string& what);

}  // namespace mori::shmem

#include "core/error_impl.hpp"
