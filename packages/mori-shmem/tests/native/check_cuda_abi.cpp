// SPDX-License-Identifier: MIT
// Compiled (never run) by test_cuda_abi.py against the real cuda.h: the hand-written driver
// declarations of src/cuda/cuda_driver.hpp must match it exactly, since libmori_shmem is built
// without CUDA headers.
#include <cuda.h>

#include <cstddef>
#include <type_traits>

#include "cuda/cuda_driver.hpp"

namespace ours = mori::shmem::cuda;

#define SAME_LAYOUT(OURS, THEIRS)                                          \
  static_assert(sizeof(OURS) == sizeof(THEIRS), #OURS " size differs");    \
  static_assert(alignof(OURS) == alignof(THEIRS), #OURS " alignment differs")

SAME_LAYOUT(ours::CUipcMemHandle, CUipcMemHandle);
SAME_LAYOUT(ours::CUmemLocation, CUmemLocation);
SAME_LAYOUT(ours::CUmemAllocationProp, CUmemAllocationProp);
SAME_LAYOUT(ours::CUmemAccessDesc, CUmemAccessDesc);
static_assert(offsetof(ours::CUmemAllocationProp, location) == offsetof(CUmemAllocationProp, location));
static_assert(offsetof(ours::CUmemAllocationProp, win32HandleMetaData) ==
              offsetof(CUmemAllocationProp, win32HandleMetaData));
static_assert(offsetof(ours::CUmemAllocationProp, allocFlags) == offsetof(CUmemAllocationProp, allocFlags));
static_assert(offsetof(ours::CUmemAccessDesc, flags) == offsetof(CUmemAccessDesc, flags));
static_assert(sizeof(ours::CUdeviceptr) == sizeof(CUdeviceptr));
static_assert(sizeof(ours::CUmemGenericAllocationHandle) == sizeof(CUmemGenericAllocationHandle));

static_assert(ours::kSuccess == CUDA_SUCCESS);
static_assert(ours::kMemLocationDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(ours::kMemAllocationPinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(ours::kHandleTypePosixFd == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(ours::kAccessReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(ours::kGranularityRecommended == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
static_assert(ours::kIpcLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
static_assert(ours::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(ours::kStreamCaptureModeRelaxed == CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(ours::kAttrComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(ours::kAttrComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(ours::kAttrVmmSupported == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
static_assert(ours::kAttrPosixFdSupported == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
static_assert(ours::kPointerAttrMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(ours::kPointerAttrDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(ours::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(ours::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(ours::kMemHostAllocDeviceMap == CU_MEMHOSTALLOC_DEVICEMAP);

// Each function pointer must be call-compatible with the versioned entry point it is bound to:
// the same number of parameters, each of the same size and pointer-ness (cuda.h's enums are our
// ints, its opaque handles our pointers).
template <typename A, typename B>
constexpr bool same_slot = sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B>;

template <typename Ours, typename Theirs>
struct CallCompatible : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct CallCompatible<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) && same_slot<R1, R2> && (same_slot<A1, A2> && ...);
};

#define SAME_SIGNATURE(FIELD, FUNCTION) \
  static_assert(CallCompatible<decltype(ours::Driver::FIELD), decltype(&FUNCTION)>::value, #FIELD " signature differs")

SAME_SIGNATURE(cuInit, cuInit);
SAME_SIGNATURE(cuGetErrorName, cuGetErrorName);
SAME_SIGNATURE(cuGetErrorString, cuGetErrorString);
SAME_SIGNATURE(cuDeviceGetCount, cuDeviceGetCount);
SAME_SIGNATURE(cuDeviceGet, cuDeviceGet);
SAME_SIGNATURE(cuDeviceGetAttribute, cuDeviceGetAttribute);
SAME_SIGNATURE(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME_SIGNATURE(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
SAME_SIGNATURE(cuCtxGetCurrent, cuCtxGetCurrent);
SAME_SIGNATURE(cuCtxSetCurrent, cuCtxSetCurrent);
SAME_SIGNATURE(cuCtxGetDevice, cuCtxGetDevice);
SAME_SIGNATURE(cuCtxSynchronize, cuCtxSynchronize);
SAME_SIGNATURE(cuMemAlloc, cuMemAlloc_v2);
SAME_SIGNATURE(cuMemFree, cuMemFree_v2);
SAME_SIGNATURE(cuMemsetD8, cuMemsetD8_v2);
SAME_SIGNATURE(cuStreamCreate, cuStreamCreate);
SAME_SIGNATURE(cuStreamDestroy, cuStreamDestroy_v2);
SAME_SIGNATURE(cuStreamSynchronize, cuStreamSynchronize);
SAME_SIGNATURE(cuMemcpyAsync, cuMemcpyAsync);
SAME_SIGNATURE(cuMemcpyHtoD, cuMemcpyHtoD_v2);
SAME_SIGNATURE(cuMemcpyDtoH, cuMemcpyDtoH_v2);
SAME_SIGNATURE(cuPointerGetAttribute, cuPointerGetAttribute);
SAME_SIGNATURE(cuIpcGetMemHandle, cuIpcGetMemHandle);
SAME_SIGNATURE(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2);
SAME_SIGNATURE(cuIpcCloseMemHandle, cuIpcCloseMemHandle);
SAME_SIGNATURE(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity);
SAME_SIGNATURE(cuMemAddressReserve, cuMemAddressReserve);
SAME_SIGNATURE(cuMemAddressFree, cuMemAddressFree);
SAME_SIGNATURE(cuMemCreate, cuMemCreate);
SAME_SIGNATURE(cuMemRelease, cuMemRelease);
SAME_SIGNATURE(cuMemMap, cuMemMap);
SAME_SIGNATURE(cuMemUnmap, cuMemUnmap);
SAME_SIGNATURE(cuMemSetAccess, cuMemSetAccess);
SAME_SIGNATURE(cuMemExportToShareableHandle, cuMemExportToShareableHandle);
SAME_SIGNATURE(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle);
SAME_SIGNATURE(cuMemHostAlloc, cuMemHostAlloc);
SAME_SIGNATURE(cuMemFreeHost, cuMemFreeHost);
SAME_SIGNATURE(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2);
SAME_SIGNATURE(cuModuleLoadData, cuModuleLoadData);
SAME_SIGNATURE(cuModuleUnload, cuModuleUnload);
SAME_SIGNATURE(cuModuleGetFunction, cuModuleGetFunction);
SAME_SIGNATURE(cuLaunchKernel, cuLaunchKernel);
