// SPDX-License-Identifier: MIT
// The slice of the CUDA driver API the cuda backend uses, opened with dlopen at first use so that
// libmori_shmem neither links libcuda nor needs CUDA headers to build: a wheel built on a machine
// without CUDA runs on one with it. The types below mirror cuda.h (CUDA 12/13) exactly;
// tests/native/check_cuda_abi.cpp compiles them against the real cuda.h where one exists.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mori::shmem::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;
using CUmemGenericAllocationHandle = unsigned long long;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;

struct CUipcMemHandle {
  char reserved[64];
};

struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};

struct CUmemAllocationProp {
  int type;                  // CU_MEM_ALLOCATION_TYPE_PINNED = 1
  int requestedHandleTypes;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};

struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
};

constexpr CUresult kSuccess = 0;
constexpr int kMemLocationDevice = 1;
constexpr int kMemAllocationPinned = 1;
constexpr int kHandleTypePosixFd = 1;
constexpr int kAccessReadWrite = 3;
constexpr int kGranularityRecommended = 1;
constexpr unsigned kIpcLazyEnablePeerAccess = 1;
constexpr unsigned kStreamNonBlocking = 1;
constexpr int kStreamCaptureModeRelaxed = 2;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;
constexpr int kAttrVmmSupported = 102;
constexpr int kAttrPosixFdSupported = 103;
constexpr int kPointerAttrMemoryType = 2;
constexpr int kPointerAttrDeviceOrdinal = 9;
constexpr unsigned kMemoryTypeDevice = 2;
constexpr unsigned kMemHostAllocPortable = 1;
constexpr unsigned kMemHostAllocDeviceMap = 2;

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetDevice)(CUdevice*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuThreadExchangeStreamCaptureMode)(int*);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);
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
  // The remote transport: pinned staging and the device proxy's ring, and the one-thread kernel
  // that applies atomics arriving for the GPU heap.
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, uint64_t, unsigned);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void**, void**);
};

// The driver, loaded and cuInit'ed once per process; throws MORI_SHMEM_ERR_UNSUPPORTED saying why
// when libcuda.so.1 is missing, lacks a symbol, or cuInit fails (no GPU, driver too old).
const Driver& driver();

// Whether driver() would succeed and at least one device is visible; never throws.
bool available();

// Throws MORI_SHMEM_ERR_SYSTEM naming `call` and the driver's error name and text unless result
// is success. `what` says what the library was doing, for the user.
void check(CUresult result, const char* call, const char* what);

}  // namespace mori::shmem::cuda
