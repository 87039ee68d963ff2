// SPDX-License-Identifier: MIT
#include "gpu/cuda_driver.hpp"

#include <dlfcn.h>

#include "core/error.hpp"

namespace mori::io::cuda {

namespace {

struct Loaded {
  Driver driver{};
  std::string failure;  // empty once loaded and initialised
};

template <typename Fn>
void bind(void* library, const char* symbol, Fn*& slot, std::string& failure) {
  slot = reinterpret_cast<Fn*>(dlsym(library, symbol));
  if (slot == nullptr && failure.empty()) failure = std::string("libcuda.so.1 has no symbol ") + symbol;
}

Loaded load() {
  Loaded loaded;
  // Never dlclose'd: the driver keeps per-process state (contexts, IPC mappings) past our use.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    loaded.failure = std::string("no NVIDIA driver: dlopen(libcuda.so.1) failed: ") + dlerror();
    return loaded;
  }
  Driver& d = loaded.driver;
  std::string& f = loaded.failure;
  // The versioned names are what cuda.h's macros resolve to (legacy default-stream ABI: the
  // copies below always name one of mori-io's own streams, never the default stream).
  bind(library, "cuInit", d.cuInit, f);
  bind(library, "cuGetErrorName", d.cuGetErrorName, f);
  bind(library, "cuGetErrorString", d.cuGetErrorString, f);
  bind(library, "cuDeviceGetCount", d.cuDeviceGetCount, f);
  bind(library, "cuDeviceGet", d.cuDeviceGet, f);
  bind(library, "cuDeviceGetPCIBusId", d.cuDeviceGetPCIBusId, f);
  bind(library, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, f);
  bind(library, "cuCtxGetCurrent", d.cuCtxGetCurrent, f);
  bind(library, "cuCtxSetCurrent", d.cuCtxSetCurrent, f);
  bind(library, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, f);
  bind(library, "cuMemAlloc_v2", d.cuMemAlloc, f);
  bind(library, "cuMemFree_v2", d.cuMemFree, f);
  bind(library, "cuMemsetD32_v2", d.cuMemsetD32, f);
  bind(library, "cuMemHostAlloc", d.cuMemHostAlloc, f);
  bind(library, "cuMemFreeHost", d.cuMemFreeHost, f);
  bind(library, "cuMemGetAddressRange_v2", d.cuMemGetAddressRange, f);
  bind(library, "cuPointerGetAttribute", d.cuPointerGetAttribute, f);
  bind(library, "cuStreamCreate", d.cuStreamCreate, f);
  bind(library, "cuStreamDestroy_v2", d.cuStreamDestroy, f);
  bind(library, "cuStreamSynchronize", d.cuStreamSynchronize, f);
  bind(library, "cuEventCreate", d.cuEventCreate, f);
  bind(library, "cuEventDestroy_v2", d.cuEventDestroy, f);
  bind(library, "cuEventRecord", d.cuEventRecord, f);
  bind(library, "cuEventQuery", d.cuEventQuery, f);
  bind(library, "cuEventSynchronize", d.cuEventSynchronize, f);
  // cuEventElapsedTime_v2 appeared in CUDA 12.8; older drivers only have the plain name.
  std::string no_v2;
  bind(library, "cuEventElapsedTime_v2", d.cuEventElapsedTime, no_v2);
  if (d.cuEventElapsedTime == nullptr) bind(library, "cuEventElapsedTime", d.cuEventElapsedTime, f);
  bind(library, "cuMemcpyAsync", d.cuMemcpyAsync, f);
  bind(library, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync, f);
  bind(library, "cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync, f);
  bind(library, "cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync, f);
  bind(library, "cuIpcGetMemHandle", d.cuIpcGetMemHandle, f);
  bind(library, "cuIpcOpenMemHandle_v2", d.cuIpcOpenMemHandle, f);
  bind(library, "cuIpcCloseMemHandle", d.cuIpcCloseMemHandle, f);
  bind(library, "cuMemHostGetDevicePointer_v2", d.cuMemHostGetDevicePointer, f);
  bind(library, "cuModuleLoadData", d.cuModuleLoadData, f);
  bind(library, "cuModuleGetFunction", d.cuModuleGetFunction, f);
  bind(library, "cuLaunchKernel", d.cuLaunchKernel, f);
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
  if (!state.failure.empty()) throw Error(Code::Unsupported, "GPU memory needs the CUDA driver: " + state.failure);
  return state.driver;
}

const std::string& unavailable_reason() { return loaded().failure; }

std::string describe(CUresult result, const char* call) {
  const Driver& d = loaded().driver;
  const char* name = "?";
  const char* text = "?";
  if (d.cuGetErrorName != nullptr) d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString != nullptr) d.cuGetErrorString(result, &text);
  return std::string(call) + " failed with " + name + " (" + text + ")";
}

void check(CUresult result, const char* call, const std::string& what) {
  if (result == kSuccess) return;
  throw Error(Code::System, what + ": " + describe(result, call));
}

}  // namespace mori::io::cuda
