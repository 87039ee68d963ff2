// SPDX-License-Identifier: MIT
// The slice of the CUDA driver API the cuda backend uses. libcuda.so.1 is opened with dlopen at
// first use, so libmori_cco neither links libcuda nor needs CUDA headers to build, and imports on
// machines without a GPU (the cpu backend still works there). The types below mirror cuda.h
// (CUDA 12/13) exactly; tests/native/check_cuda_types.cpp compiles them against the real cuda.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

namespace mori::cco::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;

struct CUmemLocation {
  int type;  // kMemLocationDevice
  int id;    // the device ordinal
};

struct CUmemAllocationProp {
  int type;                  // kMemAllocationPinned
  int requestedHandleTypes;  // kHandleTypePosixFd
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
constexpr int kMemLocationDevice = 1;
constexpr int kMemAllocationPinned = 1;
constexpr int kHandleTypePosixFd = 1;
constexpr int kAccessReadWrite = 3;
constexpr int kGranularityRecommended = 1;
constexpr unsigned kStreamNonBlocking = 1;
constexpr unsigned kStreamWriteValueDefault = 0;  // keeps the fence before the store
constexpr int kAttrVmmSupported = 102;
constexpr int kAttrPosixFdSupported = 103;

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSynchronize)();
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
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
};

// The driver, loaded and cuInit'ed once per process (thread-safe). Throws ccoUnsupported saying
// why when libcuda.so.1 is missing, lacks a symbol (driver too old), or cuInit fails.
const Driver& driver();

// Throws unless result is success: ccoOutOfMemory for CUDA_ERROR_OUT_OF_MEMORY, else
// ccoSystemError. The message is `what` followed by the driver's error name and text, so `what`
// should name the call and what it was for ("cuMemMap of LSA rank 3's slot").
void check(CUresult result, const char* what);

// check() with `what` assembled from several parts, formatted only when the call failed.
template <typename First, typename Second, typename... Rest>
void check(CUresult result, const First& first, const Second& second, const Rest&... rest) {
  if (result == kSuccess) return;
  std::ostringstream what;
  ((what << first << second) << ... << rest);
  check(result, what.str().c_str());
}

// The number of visible devices (throws like driver()).
int device_count();

// Makes device `ordinal`'s primary context current on the calling thread. The context is retained
// on first use and kept for the life of the process, because kernels, streams and mappings of
// every communicator on that device live in it. Throws ccoInvalidArgument for a negative ordinal
// and ccoUnsupported for one with no device behind it.
void make_current(int ordinal);

}  // namespace mori::cco::cuda
