// SPDX-License-Identifier: MIT
// The one exception type of mori-cco's C++ core. Its code is a cco status (cco.hpp), which the C++
// API returns and the Python bindings turn into the matching typed exception.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "mori_cco/cco.hpp"

namespace mori::cco {

class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

template <typename... Parts>
[[noreturn]] void fail(int status, Parts&&... parts) {
  std::ostringstream text;
  (text << ... << std::forward<Parts>(parts));
  throw Error(status, text.str());
}

// Throws SYSTEM with strerror(errno) appended.
[[noreturn]] void fail_errno(const std::string& what);

}  // namespace mori::cco
