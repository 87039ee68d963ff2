// SPDX-License-Identifier: MIT
// mori-shmem's view of the CUDA driver: the declarations and the dlopen loader are the shared
// <mori/cuda_driver.hpp> of the root package (mori.get_include()), so libmori_shmem neither links
// libcuda nor needs CUDA headers to build; this adds the calls that raise mori-shmem's errors.
#pragma once

#include <mori/cuda_driver.hpp>

namespace mori::shmem::cuda {

// The driver's types, constants and Driver table, under the names the backend has always used.
using namespace ::mori::common::cuda;

// The driver, loaded and cuInit'ed once per process; throws MORI_SHMEM_ERR_UNSUPPORTED saying why
// when libcuda.so.1 is missing, lacks a symbol, or cuInit fails (no GPU, driver too old).
const Driver& driver();

// Whether driver() would succeed and at least one device is visible; never throws.
bool available();

// Throws MORI_SHMEM_ERR_SYSTEM naming `call` and the driver's error name and text unless result
// is success. `what` says what the library was doing, for the user.
void check(CUresult result, const char* call, const char* what);

}  // namespace mori::shmem::cuda
