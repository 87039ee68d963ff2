// SPDX-License-Identifier: MIT
#include "cuda/driver.hpp"

#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace mori::cco::cuda {

namespace {

// Primary contexts retained so far, by ordinal (null until first use).
std::mutex contexts_mutex;
std::vector<CUcontext> contexts;

CUcontext primary_context(int ordinal) {
  if (ordinal < 0) fail(ccoInvalidArgument, "device must be a CUDA ordinal >= 0, got ", ordinal);
  const Driver& d = driver();
  std::lock_guard<std::mutex> lock(contexts_mutex);
  if (contexts.empty()) contexts.assign(static_cast<size_t>(device_count()), nullptr);
  if (static_cast<size_t>(ordinal) >= contexts.size()) {
    fail(ccoUnsupported, "no CUDA device ", ordinal, ": ", contexts.size(), " device(s) are visible");
  }
  CUcontext& context = contexts[static_cast<size_t>(ordinal)];
  if (context == nullptr) {
    CUdevice device = 0;
    CUcontext retained = nullptr;
    check(d.cuDeviceGet(&device, ordinal), "cuDeviceGet (opening the GPU)");
    check(d.cuDevicePrimaryCtxRetain(&retained, device), "cuDevicePrimaryCtxRetain (opening the GPU's context)");
    context = retained;
  }
  return context;
}

}  // namespace

const Driver& driver() {
  try {
    return ::mori::common::cuda::driver();
  } catch (const Unavailable& e) {
    fail(ccoUnsupported, "the cuda backend is unavailable: ", e.what());
  }
}

void check(CUresult result, const char* what) {
  if (result == kSuccess) return;
  fail(result == kErrorOutOfMemory ? ccoOutOfMemory : ccoSystemError, what, " failed with ",
       ::mori::common::cuda::describe(result));
}

int device_count() {
  int count = 0;
  check(driver().cuDeviceGetCount(&count), "cuDeviceGetCount (counting GPUs)");
  return count;
}

void make_current(int ordinal) {
  const CUcontext context = primary_context(ordinal);
  const Driver& d = driver();
  CUcontext current = nullptr;
  // Callers (PyTorch, user threads) may have switched contexts since; switch only when needed.
  if (d.cuCtxGetCurrent(&current) == kSuccess && current == context) return;
  check(d.cuCtxSetCurrent(context), "cuCtxSetCurrent (making the GPU's primary context current)");
}

}  // namespace mori::cco::cuda
