// SPDX-License-Identifier: MIT
// The slice of the CUDA driver API the mori packages use, opened with dlopen at first use: a
// package built with this header neither links libcuda nor needs CUDA headers, so a wheel built
// on a machine without CUDA imports (and runs its cpu backend) on one without a GPU. The types
// mirror cuda.h (CUDA 12/13) exactly; packages/mori/tests/native/check_cuda_abi.cpp compiles them
// against the real cuda.h. Each package wraps driver() to turn Unavailable into its own error.
//
// Header-only: every function is inline and everything lives in a hidden-visibility namespace, so
// each shared library that includes this keeps its own copy (its own loaded table) and two
// packages' libraries in one process never bind to each other's.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mori {
namespace common __attribute__((visibility("hidden"))) {
namespace cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

struct CUipcMemHandle {
  char reserved[64];
};

struct CUmemLocation {
  int type;  // kMemLocationDevice
  int id;    // the device ordinal
};

struct CUmemAllocationProp {
  int type;                   // kMemAllocationPinned
  int requestedHandleTypes;   // kHandleTypePosixFd
  CUmemLocation location;
  void* win32HandleMetaData;  // must stay null off Windows
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // kAccessReadWrite
};

constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorOutOfMemory = 2;
constexpr CUresult kErrorNotReady = 600;
constexpr int kMemLocationDevice = 1;
constexpr int kMemAllocationPinned = 1;
constexpr int kHandleTypePosixFd = 1;
constexpr int kAccessReadWrite = 3;
constexpr int kGranularityRecommended = 1;
constexpr unsigned kIpcLazyEnablePeerAccess = 1;
constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kStreamWriteValueDefault = 0;  // keeps the fence before the store
constexpr int kStreamCaptureModeRelaxed = 2;
constexpr unsigned kEventDefault = 0;
constexpr unsigned kEventDisableTiming = 2;
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrVmmSupported = 102;
constexpr int kAttrPosixFdSupported = 103;
constexpr int kPointerAttrMemoryType = 2;
constexpr int kPointerAttrDeviceOrdinal = 9;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kMemHostAllocPortable = 1;
constexpr unsigned kMemHostAllocDeviceMap = 2;

// Pinned memory on device `device` that exports as a POSIX fd: what the VMM heaps (mori-shmem's
// vmm_heap mode, mori-cco's slots) create with cuMemCreate and share with the other processes.
inline CUmemAllocationProp exportable_device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = kMemAllocationPinned;
  prop.requestedHandleTypes = kHandleTypePosixFd;
  prop.location.type = kMemLocationDevice;
  prop.location.id = device;
  return prop;
}

// Every entry point is non-null once driver() returned.
struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // Devices and contexts
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuCtxCreate)(CUcontext*, unsigned, CUdevice);
  CUresult (*cuCtxDestroy)(CUcontext);
  // Memory
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr);
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  // IPC handles and the virtual memory management API
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuMemGetAllocationGranularity)(size_t*, const CUmemAllocationProp*, int);
  CUresult (*cuMemAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
  CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
  CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*cuMemExportToShareableHandle)(void*, CUmemGenericAllocationHandle, int, unsigned long long);
  CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle*, void*, int);
  // Streams and events
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
  CUresult (*cuThreadExchangeStreamCaptureMode)(int*);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  // Modules and launches (kernels compiled at run time)
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
};

// Thrown by driver() when the CUDA driver cannot be used; what() says why.
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The outcome of the one load per library: the table, or why it is unusable.
struct Loaded {
  Driver driver{};
  std::string failure;  // empty once loaded and initialised
};

namespace detail {

template <typename Fn>
inline void bind(void* library, const char* symbol, Fn*& slot, std::string& failure) {
  slot = reinterpret_cast<Fn*>(dlsym(library, symbol));
  if (slot == nullptr && failure.empty()) {
    failure = std::string("libcuda.so.1 has no symbol ") + symbol + " (the NVIDIA driver is too old)";
  }
}

inline Loaded load() {
  Loaded loaded;
  // Never dlclose'd: the driver keeps per-process state (contexts, IPC and VMM mappings) past our use.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) {
    const char* why = dlerror();
    loaded.failure = std::string("no NVIDIA driver: dlopen(libcuda.so.1) failed: ") + (why != nullptr ? why : "?");
    return loaded;
  }
  Driver& d = loaded.driver;
  std::string& f = loaded.failure;
  // Bound by the names cuda.h's macros resolve to without per-thread default stream: the plain
  // names of the versioned calls are legacy ABIs with other signatures.
  bind(library, "cuInit", d.cuInit, f);
  bind(library, "cuGetErrorName", d.cuGetErrorName, f);
  bind(library, "cuGetErrorString", d.cuGetErrorString, f);
  bind(library, "cuDeviceGetCount", d.cuDeviceGetCount, f);
  bind(library, "cuDeviceGet", d.cuDeviceGet, f);
  bind(library, "cuDeviceGetAttribute", d.cuDeviceGetAttribute, f);
  bind(library, "cuDeviceGetPCIBusId", d.cuDeviceGetPCIBusId, f);
  bind(library, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, f);
  bind(library, "cuDevicePrimaryCtxRelease_v2", d.cuDevicePrimaryCtxRelease, f);
  bind(library, "cuCtxGetCurrent", d.cuCtxGetCurrent, f);
  bind(library, "cuCtxSetCurrent", d.cuCtxSetCurrent, f);
  bind(library, "cuCtxGetDevice", d.cuCtxGetDevice, f);
  bind(library, "cuCtxSynchronize", d.cuCtxSynchronize, f);
  bind(library, "cuCtxCreate_v2", d.cuCtxCreate, f);
  bind(library, "cuCtxDestroy_v2", d.cuCtxDestroy, f);
  bind(library, "cuMemAlloc_v2", d.cuMemAlloc, f);
  bind(library, "cuMemFree_v2", d.cuMemFree, f);
  bind(library, "cuMemsetD8_v2", d.cuMemsetD8, f);
  bind(library, "cuMemsetD32_v2", d.cuMemsetD32, f);
  bind(library, "cuMemGetAddressRange_v2", d.cuMemGetAddressRange, f);
  bind(library, "cuPointerGetAttribute", d.cuPointerGetAttribute, f);
  bind(library, "cuMemHostAlloc", d.cuMemHostAlloc, f);
  bind(library, "cuMemFreeHost", d.cuMemFreeHost, f);
  bind(library, "cuMemHostGetDevicePointer_v2", d.cuMemHostGetDevicePointer, f);
  bind(library, "cuMemcpyAsync", d.cuMemcpyAsync, f);
  bind(library, "cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync, f);
  bind(library, "cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync, f);
  bind(library, "cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync, f);
  bind(library, "cuMemcpyHtoD_v2", d.cuMemcpyHtoD, f);
  bind(library, "cuMemcpyDtoH_v2", d.cuMemcpyDtoH, f);
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
  bind(library, "cuStreamCreate", d.cuStreamCreate, f);
  bind(library, "cuStreamDestroy_v2", d.cuStreamDestroy, f);
  bind(library, "cuStreamSynchronize", d.cuStreamSynchronize, f);
  bind(library, "cuStreamQuery", d.cuStreamQuery, f);
  bind(library, "cuStreamWriteValue64_v2", d.cuStreamWriteValue64, f);
  bind(library, "cuThreadExchangeStreamCaptureMode", d.cuThreadExchangeStreamCaptureMode, f);
  bind(library, "cuEventCreate", d.cuEventCreate, f);
  bind(library, "cuEventDestroy_v2", d.cuEventDestroy, f);
  bind(library, "cuEventRecord", d.cuEventRecord, f);
  bind(library, "cuEventQuery", d.cuEventQuery, f);
  bind(library, "cuEventSynchronize", d.cuEventSynchronize, f);
  // cuEventElapsedTime_v2 appeared in CUDA 12.8; older drivers only have the plain name.
  std::string no_v2;
  bind(library, "cuEventElapsedTime_v2", d.cuEventElapsedTime, no_v2);
  if (d.cuEventElapsedTime == nullptr) bind(library, "cuEventElapsedTime", d.cuEventElapsedTime, f);
  bind(library, "cuModuleLoadData", d.cuModuleLoadData, f);
  bind(library, "cuModuleUnload", d.cuModuleUnload, f);
  bind(library, "cuModuleGetFunction", d.cuModuleGetFunction, f);
  bind(library, "cuLaunchKernel", d.cuLaunchKernel, f);
  if (!f.empty()) return loaded;
  const CUresult init = d.cuInit(0);
  if (init != kSuccess) {
    const char* name = nullptr;
    d.cuGetErrorName(init, &name);
    f = std::string("cuInit failed with ") + (name != nullptr ? name : "?") +
        " (no usable GPU, or a driver older than this library needs)";
  }
  return loaded;
}

}  // namespace detail

// The driver, loaded and cuInit'ed once per library (thread-safe); never throws.
inline const Loaded& loaded() {
  static const Loaded instance = detail::load();
  return instance;
}

// The loaded table; throws Unavailable saying why when libcuda.so.1 is missing, lacks a symbol
// (driver too old) or cuInit failed (no usable GPU).
inline const Driver& driver() {
  const Loaded& state = loaded();
  if (!state.failure.empty()) throw Unavailable(state.failure);
  return state.driver;
}

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a driver result; never throws. Usable before
// or without a loaded driver (then the number stands in for the name).
inline std::string describe(CUresult result) {
  const Driver& d = loaded().driver;
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.cuGetErrorName != nullptr) d.cuGetErrorName(result, &name);
  if (d.cuGetErrorString != nullptr) d.cuGetErrorString(result, &text);
  return (name != nullptr ? std::string(name) : "CUDA error " + std::to_string(result)) + " (" +
         (text != nullptr ? text : "no description") + ")";
}

}  // namespace cuda
}  // namespace common
}  // namespace mori
