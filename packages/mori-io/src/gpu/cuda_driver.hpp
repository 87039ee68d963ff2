// SPDX-License-Identifier: MIT
// The slice of the CUDA driver API mori-io uses for GPU memory, opened with dlopen at first use:
// the wheel neither links libcuda nor needs CUDA headers to build, and a process without a GPU
// only pays for this when it asks for GPU memory. The declarations mirror cuda.h (CUDA 12/13);
// tests/native/check_cuda_abi.cpp compiles them against the real cuda.h where one exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mori::io::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUdeviceptr = unsigned long long;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

struct CUipcMemHandle {
  char reserved[64];
};

constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorNotReady = 600;
constexpr unsigned kMemHostAllocPortable = 1;
constexpr unsigned kMemHostAllocDeviceMap = 2;
constexpr unsigned kIpcLazyEnablePeerAccess = 1;
constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kEventDefault = 0;
constexpr unsigned kEventDisableTiming = 2;
constexpr int kPointerAttrMemoryType = 2;
constexpr int kPointerAttrDeviceOrdinal = 9;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr int kDeviceAttrMultiprocessorCount = 16;

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD32)(CUdeviceptr, unsigned, size_t);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemGetAddressRange)(CUdeviceptr*, size_t*, CUdeviceptr);
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuIpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*cuIpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned);
  CUresult (*cuIpcCloseMemHandle)(CUdeviceptr);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
};

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
