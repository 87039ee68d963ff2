// SPDX-License-Identifier: MIT
// How a package's C API (mori_shmem.h, cco.h) turns a C++ exception into its status code: every
// exported function runs its body under guarded_call, which keeps the message for the thread's
// last-error function. One policy, so the libraries report the same failures the same way.
//
// Header-only: an inline template in a hidden-visibility namespace, like the other shared headers.
// packages/mori/tests/test_shared_headers.py runs each path of it.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

namespace mori {
namespace common __attribute__((visibility("hidden"))) {

// A C API's codes for success and for the two failures every library has.
struct CApiCodes {
  int success;
  int out_of_memory;  // std::bad_alloc
  int internal;       // any other std::exception: a bug, not a caller's mistake
};

// Runs body(): codes.success, or the status() of the library's own LibraryError, or
// codes.out_of_memory / codes.internal; each failure's message goes to last_error.
template <typename LibraryError, typename Body>
int guarded_call(const CApiCodes& codes, std::string& last_error, Body&& body) {
  try {
    std::forward<Body>(body)();
    return codes.success;
  } catch (const LibraryError& error) {
    last_error = error.what();
    return static_cast<int>(error.status());
  } catch (const std::bad_alloc&) {
    last_error = "out of host memory";
    return codes.out_of_memory;
  } catch (const std::exception& error) {
    last_error = std::string("internal error: ") + error.what();
    return codes.internal;
  }
}

}  // namespace common
}  // namespace mori
