// SPDX-License-Identifier: MIT
// mori-io's view of the CUDA driver: the declarations and the dlopen loader are the shared
// <mori/cuda_driver.hpp> of the root package (mori.get_include()), so the wheel neither links
// libcuda nor needs CUDA headers to build, and a process without a GPU only pays for this when it
// asks for GPU memory. This adds the calls that raise mori-io's errors.
#pragma once

#include <mori/cuda_driver.hpp>
#include <string>

namespace mori::io::cuda {

// The driver's types, constants and Driver table, under the names the GPU code has always used.
using namespace ::mori::common::cuda;

// The driver, loaded and cuInit'ed once per process; throws Error(Unsupported) saying why when
// libcuda.so.1 is missing, lacks a symbol, or cuInit fails (no GPU, driver too old).
const Driver& driver();

// Empty when driver() would succeed, else the reason it cannot; never throws.
const std::string& unavailable_reason();

// "cuXxx failed with CUDA_ERROR_NAME (text)" for a failed call; never throws.
std::string describe(CUresult result, const char* call);

// Throws Error(System) naming `what`, `call` and the driver's error unless result is success.
void check(CUresult result, const char* call, const std::string& what);

}  // namespace mori::io::cuda
