// SPDX-License-Identifier: MIT
#include "cuda/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.hpp"

namespace mori::shmem::cuda {

namespace {

struct Loaded {
  Driver driver{};
  std::string failure;  // empty once loaded and initialised
};

template <typename Fn>
bool bind(void* library, const char* symbol, Fn*& slot, std::string& failure) {
  slot = reinterpret_cast<Fn*>(dlsym(library, symbol));
  if (slot == nullptr && failure.empty()) failure = std::string("libcuda.so.1 has no symbol ") + symbol;
  return slot != nullptr;
}

Loaded load() {
  Loaded loaded;
  // Never dlclose'd: CUDA keeps per-process state that must outlive every mapping we make.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    loaded.failure = std::string("no NVIDIA driver: dlopen(libcuda.so.1) failed: ") + dlerror();
    return loaded;
  }
  Driver& d = loaded.driver;
  std::string& f = loaded.failure;
  // The versioned names are what cuda.h's macros resolve to; the plain ones are legacy ABIs.
  bind(library, "cuInit", d.cuInit, f);
  bind(library, "cuGetErrorName", d.cuGetErrorName, f);
  bind(library, "cuGetErrorString", d.cuGetErrorString, f);
  bind(library, "cuDeviceGetCount", d.cuDeviceGetCount, f);
  bind(library, "cuDeviceGet", d.cuDeviceGet, f);
  bind(library, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, f);
  bind(library, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, f);
  bind(library, "cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease, f);
  bind(library, "cuCtxGetCurrent", d.cuCtxGetCurrent, f);
  bind(library, "cuCtxSetCurrent", d.cuCtxSetCurrent, f);
  bind(library, "cuCtxGetDevice", d.cuCtxGetDevice, f);
  bind(library, "cuCtxSynchronize", d.cuCtxSynchronize, f);
  bind(library, "cuMemAlloc_v2", d.cuMemAlloc, f);
  bind(library, "cuMemFree_v2", d.cuMemFree, f);
  bind(library, "cuMemsetD8_v2", d.cuMemsetD8, f);
  bind(library, "cuStreamCreate", d.cuStreamCreate, f);
  bind(library, "cuStreamDestroy_v2", d.cuStreamDestroy, f);
  bind(library, "cuStreamSynchronize", d.cuStreamSynchronize, f);
  bind(library, "cuThreadExchangeStreamCaptureMode", d.cuThreadExchangeStreamCaptureMode, f);
  bind(library, "cuMemcpyAsync", d.cuMemcpyAsync, f);
  bind(library, "cuMemcpyHtoD_v2", d.cuMemcpyHtoD, f);
  bind(library, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, f);
  bind(library, "cuPointerGetAttribute", d.cuPointerGetAttribute, f);
  bind(library, "cuIpcGetMemHandle", d.cuIpcGetMemHandle, f);
  bind(library, "cuIpcOpenMemHandle_v2", d.cuIpcOpenMemHandle, f);
  bind(library, "cuIpcCloseMemHandle", d.cuIpcCloseMemHandle, f);
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
  bind(library, "cuMemHostAlloc", d.cuMemHostAlloc, f);
  bind(library, "cuMemFreeHost", d.cuMemFreeHost, f);
  bind(library, "cuMemHostGetDevicePointer_v2", d.cuMemHostGetDevicePointer, f);
  bind(library, "cuModuleLoadData", d.cuModuleLoadData, f);
  bind(library, "cuModuleUnload", d.cuModuleUnload, f);
  bind(library, "cuModuleGetFunction", d.cuModuleGetFunction, f);
  bind(library, "cuLaunchKernel", d.cuLaunchKernel, f);
  bind(library, "cuStreamWriteValue64_v2", d.cuStreamWriteValue64, f);
  if (!f.empty()) return loaded;
  const CUresult init = d.cuInit(0);
  if (init != kSuccess) {
    const char* name = "?";
    d.cuGetErrorName(init, &name);
    f = std::string("cuInit failed with ") + name + " (no usable GPU, or a driver older than this library needs)";
  }
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const Driver& driver() {
  const Loaded& state = loaded();
  if (!state.failure.empty()) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "the cuda backend is unavailable: ", state.failure);
  return state.driver;
}

bool available() {
  const Loaded& state = loaded();
  if (!state.failure.empty()) return false;
  int count = 0;
  return state.driver.cuDeviceGetCount(&count) == kSuccess && count > 0;
}

void check(CUresult result, const char* call, const char* what) {
  if (result == kSuccess) return;
  const Driver& d = loaded().driver;
  const char* name = "?";
  const char* text = "?";
  if (d.cuGetErrorName != nullptr) d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString != nullptr) d.cuGetErrorString(result, &text);
  throw_error(MORI_SHMEM_ERR_SYSTEM, what, ": ", call, " failed with ", name, " (", text, ")");
}

}  // namespace mori::shmem::cuda
