// SPDX-License-Identifier: MIT
// The one exception type of the native engine. Its Code picks the Python class that
// mori.io.errors registers for it (bindings.cpp), so every failure reaches Python typed.
#pragma once

#include <stdexcept>
#include <string>

namespace mori::io {

enum class Code : int {
  InvalidArgument = 1,
  NotFound = 2,
  Unsupported = 3,
  Connection = 4,
  Authentication = 5,
  Protocol = 6,
  System = 7,
  Timeout = 8,
  Internal = 9,
  Closed = 10,
};

class Error : public std::runtime_error {
 public:
  Error(Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

}  // namespace mori::io
