// SPDX-License-Identifier: MIT
// The CUDA driver for the cuda backend. The declarations and the dlopen loader are the shared
// <mori/cuda_driver.hpp> of the root package (mori.get_include()), so libmori_cco neither links
// libcuda nor needs CUDA headers to build, and imports on machines without a GPU (the cpu backend
// still works there). This adds the calls that raise cco's errors and the primary contexts.
#pragma once

#include <mori/cuda_driver.hpp>
#include <sstream>
#include <string>

namespace mori::cco::cuda {

// The driver's types, constants and Driver table, under the names the backend has always used.
using namespace ::mori::common::cuda;

// The driver, loaded and cuInit'ed once per process (thread-safe). Throws ccoUnsupported saying
// why when libcuda.so.1 is missing, lacks a symbol (driver too old), or cuInit fails.
const Driver& driver();

// Throws unless result is success: ccoOutOfMemory for CUDA_ERROR_OUT_OF_MEMORY, else
// ccoSystemError. The message is `what` followed by the driver's error name and text, so `what`
// should name the call and what it was for ("cuMemMap of LSA rank 3's slot").
void check(CUresult result, const char* what);

// check() with `what` assembled from several parts, formatted only when the call failed.
template <typename First, typename Second, typename... Rest>
void check(CUresult result, const First& first, const Second& second, const Rest&... rest) {
  if (result == kSuccess) return;
  std::ostringstream what;
  ((what << first << second) << ... << rest);
  check(result, what.str().c_str());
}

// The number of visible devices (throws like driver()).
int device_count();

// Makes device `ordinal`'s primary context current on the calling thread. The context is retained
// on first use and kept for the life of the process, because kernels, streams and mappings of
// every communicator on that device live in it. Throws ccoInvalidArgument for a negative ordinal
// and ccoUnsupported for one with no device behind it.
void make_current(int ordinal);

}  // namespace mori::cco::cuda
