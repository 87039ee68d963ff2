// SPDX-License-Identifier: MIT
#include "gpu/cuda_driver.hpp"

#include "core/error.hpp"

namespace mori::io::cuda {

const Driver& driver() {
  try {
    return ::mori::common::cuda::driver();
  } catch (const Unavailable& e) {
    throw Error(Code::Unsupported, std::string("GPU memory needs the CUDA driver: ") + e.what());
  }
}

const std::string& unavailable_reason() { return ::mori::common::cuda::loaded().failure; }

std::string describe(CUresult result, const char* call) {
  return std::string(call) + " failed with " + ::mori::common::cuda::describe(result);
}

void check(CUresult result, const char* call, const std::string& what) {
  if (result == kSuccess) return;
  throw Error(Code::System, what + ": " + describe(result, call));
}

}  // namespace mori::io::cuda
