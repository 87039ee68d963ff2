// SPDX-License-Identifier: MIT
// Built by test_shared_headers.py into two shared libraries (without -fvisibility=hidden), which
// must export nothing of the shared headers: each package's library keeps its own copy.
#include <mori/cuda_driver.hpp>
#include <mori/hmac_sha256.hpp>
#include <mori/ucx_api.hpp>

extern "C" int USER_ENTRY(const char* ucx_dir) {
  int result = mori::common::cuda::loaded().failure.empty() ? 1 : 0;
  try {
    result += int(mori::common::ucx::load(ucx_dir).minor);
  } catch (const mori::common::ucx::Unavailable&) {
  }
  const uint8_t message[3] = {'a', 'b', 'c'};
  return result + mori::common::sha256(message, sizeof(message))[0];
}
