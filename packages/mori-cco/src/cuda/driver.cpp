// SPDX-License-Identifier: MIT
#include "cuda/driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace mori::cco::cuda {

namespace {

struct Loaded {
  Driver driver{};
  std::string failure;  // empty once loaded and initialised
};

template <typename Fn>
void bind(void* library, const char* symbol, Fn*& slot, std::string& failure) {
  slot = reinterpret_cast<Fn*>(dlsym(library, symbol));
  if (slot == nullptr && failure.empty()) {
    failure = std::string("libcuda.so.1 has no symbol ") + symbol + " (the NVIDIA driver is too old)";
  }
}

Loaded load() {
  Loaded loaded;
  // Never dlclose'd: the driver keeps per-process state that must outlive every mapping we make.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    const char* why = dlerror();
    loaded.failure = std::string("no NVIDIA driver: dlopen(libcuda.so.1) failed: ") + (why != nullptr ? why : "?");
    return loaded;
  }
  Driver& d = loaded.driver;
  std::string& f = loaded.failure;
  // Bound by the names cuda.h's macros resolve to (without per-thread default stream): the plain
  // names of the versioned calls are legacy ABIs with other signatures.
  bind(library, "cuInit", d.cuInit, f);
  bind(library, "cuGetErrorName", d.cuGetErrorName, f);
  bind(library, "cuGetErrorString", d.cuGetErrorString, f);
  bind(library, "cuDeviceGet", d.cuDeviceGet, f);
  bind(library, "cuDeviceGetCount", d.cuDeviceGetCount, f);
  bind(library, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, f);
  bind(library, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, f);
  bind(library, "cuCtxSetCurrent", d.cuCtxSetCurrent, f);
  bind(library, "cuCtxGetCurrent", d.cuCtxGetCurrent, f);
  bind(library, "cuCtxSynchronize", d.cuCtxSynchronize, f);
  bind(library, "cuMemGetAllocationGranularity", d.cuMemGetAllocationGranularity, f);
  bind(library, "cuMemAddressReserve", d.cuMemAddressReserve, f);
  bind(library, "cuMemAddressFree", d.cuMemAddressFree, f);
  bind(library, "cuMemCreate", d.cuMemCreate, f);
  bind(library, "cuMemRelease", d.cuMemRelease, f);
  bind(library, "cuMemMap", d.cuMemMap, f);
  bind(library, "cuMemUnmap", d.cuMemUnmap, f);
  bind(library, "cuMemSetAccess", d.cuMemSetAccess, f);
  bind(library, "cuMemExportToShareableHandle", d.cuMemExportToShareableHandle, f);
  bind(library, "cuMemImportFromShareableHandle", d.cuMemImportFromShareableHandle, f);
  bind(library, "cuMemsetD8_v2", d.cuMemsetD8, f);
  bind(library, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, f);
  bind(library, "cuStreamCreate", d.cuStreamCreate, f);
  bind(library, "cuStreamDestroy_v2", d.cuStreamDestroy, f);
  bind(library, "cuStreamSynchronize", d.cuStreamSynchronize, f);
  bind(library, "cuStreamQuery", d.cuStreamQuery, f);
  bind(library, "cuMemcpyAsync", d.cuMemcpyAsync, f);
  bind(library, "cuStreamWriteValue64_v2", d.cuStreamWriteValue64, f);
  if (!f.empty()) return loaded;
  const CUresult init = d.cuInit(0);
  if (init != kSuccess) {
    const char* name = "?";
    d.cuGetErrorName(init, &name);
    f = std::string("cuInit failed with ") + (name != nullptr ? name : "?") +
        " (no usable GPU, or a driver older than this library needs)";
  }
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();  // C++11 statics: initialised once, thread-safe
  return instance;
}

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
  const Loaded& state = loaded();
  if (!state.failure.empty()) fail(ccoUnsupported, "the cuda backend is unavailable: ", state.failure);
  return state.driver;
}

void check(CUresult result, const char* what) {
  if (result == kSuccess) return;
  const Driver& d = loaded().driver;
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName != nullptr) d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString != nullptr) d.cuGetErrorString(result, &text);
  fail(result == kErrorOutOfMemory ? ccoOutOfMemory : ccoSystemError, what, " failed with ",
       name != nullptr ? name : "CUDA error", " ", result, " (", text != nullptr ? text : "no description", ")");
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
