// SPDX-License-Identifier: MIT
#include "cuda/cuda_driver.hpp"

#include "core/error.hpp"

namespace mori::shmem::cuda {

const Driver& driver() {
  try {
    return ::mori::common::cuda::driver();
  } catch (const Unavailable& e) {
    throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "the cuda backend is unavailable: ", e.what());
  }
}

bool available() {
  const Loaded& state = ::mori::common::cuda::loaded();
  if (!state.failure.empty()) return false;
  int count = 0;
  return state.driver.cuDeviceGetCount(&count) == kSuccess && count > 0;
}

void check(CUresult result, const char* call, const char* what) {
  if (result == kSuccess) return;
  throw_error(MORI_SHMEM_ERR_SYSTEM, what, ": ", call, " failed with ", ::mori::common::cuda::describe(result));
}

}  // namespace mori::shmem::cuda
