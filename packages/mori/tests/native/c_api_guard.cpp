// SPDX-License-Identifier: MIT
// Run by test_shared_headers.py: prints "<status> <last error>" for a body that returns, throws
// the library's error, throws std::bad_alloc and throws another std::exception, in that order.
#include <cstdio>
#include <mori/c_api_guard.hpp>
#include <new>
#include <stdexcept>
#include <string>

namespace {

struct LibraryError : std::runtime_error {
  LibraryError(int status, const char* message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }
  int status_;
};

constexpr mori::common::CApiCodes kCodes{0, 7, 9};

void report(int status, const std::string& last_error) { std::printf("%d %s\n", status, last_error.c_str()); }

}  // namespace

int main() {
  std::string last_error = "-";
  report(mori::common::guarded_call<LibraryError>(kCodes, last_error, [] {}), last_error);
  report(mori::common::guarded_call<LibraryError>(kCodes, last_error, [] { throw LibraryError(3, "size must be > 0"); }),
         last_error);
  report(mori::common::guarded_call<LibraryError>(kCodes, last_error, [] { throw std::bad_alloc(); }), last_error);
  report(mori::common::guarded_call<LibraryError>(kCodes, last_error, [] { throw std::logic_error("bad state"); }),
         last_error);
  return 0;
}
