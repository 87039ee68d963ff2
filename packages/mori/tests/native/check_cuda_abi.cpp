// SPDX-License-Identifier: MIT
// Compiled (never run) by test_shared_headers.py against the real cuda.h: the packages build
// without CUDA headers, so the hand-written declarations of <mori/cuda_driver.hpp> must match
// cuda.h exactly, or calls into libcuda silently pass garbage.
#include <cuda.h>

#include <cstddef>
#include <mori/cuda_driver.hpp>
#include <type_traits>

namespace ours = mori::common::cuda;

#define SAME_LAYOUT(OURS, THEIRS)                                       \
  static_assert(sizeof(OURS) == sizeof(THEIRS), #OURS " size differs"); \
  static_assert(alignof(OURS) == alignof(THEIRS), #OURS " alignment differs")
#define SAME_OFFSET(OURS, THEIRS, FIELD) \
  static_assert(offsetof(OURS, FIELD) == offsetof(THEIRS, FIELD), #OURS "::" #FIELD " offset differs")

SAME_LAYOUT(ours::CUipcMemHandle, CUipcMemHandle);

SAME_LAYOUT(ours::CUmemLocation, CUmemLocation);
SAME_OFFSET(ours::CUmemLocation, CUmemLocation, type);
SAME_OFFSET(ours::CUmemLocation, CUmemLocation, id);

SAME_LAYOUT(ours::CUmemAllocationProp, CUmemAllocationProp);
SAME_OFFSET(ours::CUmemAllocationProp, CUmemAllocationProp, type);
SAME_OFFSET(ours::CUmemAllocationProp, CUmemAllocationProp, requestedHandleTypes);
SAME_OFFSET(ours::CUmemAllocationProp, CUmemAllocationProp, location);
SAME_OFFSET(ours::CUmemAllocationProp, CUmemAllocationProp, win32HandleMetaData);
SAME_OFFSET(ours::CUmemAllocationProp, CUmemAllocationProp, allocFlags);
SAME_LAYOUT(decltype(ours::CUmemAllocationProp::allocFlags), decltype(CUmemAllocationProp::allocFlags));
SAME_OFFSET(decltype(ours::CUmemAllocationProp::allocFlags), decltype(CUmemAllocationProp::allocFlags),
            gpuDirectRDMACapable);
SAME_OFFSET(decltype(ours::CUmemAllocationProp::allocFlags), decltype(CUmemAllocationProp::allocFlags), usage);

SAME_LAYOUT(ours::CUmemAccessDesc, CUmemAccessDesc);
SAME_OFFSET(ours::CUmemAccessDesc, CUmemAccessDesc, location);
SAME_OFFSET(ours::CUmemAccessDesc, CUmemAccessDesc, flags);

// cuda.h's enums travel as our ints, its handles as our pointers or integers of the same size.
static_assert(sizeof(ours::CUresult) == sizeof(CUresult));
static_assert(sizeof(ours::CUdevice) == sizeof(CUdevice));
static_assert(sizeof(ours::CUdeviceptr) == sizeof(CUdeviceptr));
static_assert(sizeof(ours::CUmemGenericAllocationHandle) == sizeof(CUmemGenericAllocationHandle));
static_assert(sizeof(ours::CUcontext) == sizeof(CUcontext));
static_assert(sizeof(ours::CUstream) == sizeof(CUstream));
static_assert(sizeof(ours::CUevent) == sizeof(CUevent));
static_assert(sizeof(int) == sizeof(CUmemAllocationType) && sizeof(int) == sizeof(CUmemAllocationHandleType) &&
              sizeof(int) == sizeof(CUmemLocationType) && sizeof(int) == sizeof(CUmemAccess_flags) &&
              sizeof(int) == sizeof(CUdevice_attribute) && sizeof(int) == sizeof(CUmemAllocationGranularity_flags) &&
              sizeof(int) == sizeof(CUpointer_attribute) && sizeof(int) == sizeof(CUstreamCaptureMode));

static_assert(ours::kSuccess == CUDA_SUCCESS);
static_assert(ours::kErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(ours::kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(ours::kMemLocationDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(ours::kMemAllocationPinned == CU_MEM_ALLOCATION_TYPE_PINNED);
static_assert(ours::kHandleTypePosixFd == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(ours::kAccessReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(ours::kGranularityRecommended == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
static_assert(ours::kIpcLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
static_assert(ours::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(ours::kStreamWriteValueDefault == CU_STREAM_WRITE_VALUE_DEFAULT);
static_assert(ours::kStreamCaptureModeRelaxed == CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(ours::kEventDefault == CU_EVENT_DEFAULT);
static_assert(ours::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(ours::kAttrMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
static_assert(ours::kAttrComputeCapabilityMajor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
static_assert(ours::kAttrComputeCapabilityMinor == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
static_assert(ours::kAttrVmmSupported == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED);
static_assert(ours::kAttrPosixFdSupported == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
static_assert(ours::kPointerAttrMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(ours::kPointerAttrDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(ours::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(ours::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(ours::kMemHostAllocDeviceMap == CU_MEMHOSTALLOC_DEVICEMAP);

// Each function pointer must be call-compatible with the entry point cuda_driver.hpp binds it to:
// the same number of parameters, each of the same size and pointer-ness.
template <typename A, typename B>
constexpr bool same_slot = sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B>;

template <typename Ours, typename Theirs>
struct CallCompatible : std::false_type {};
template <typename R1, typename... A1, typename R2, typename... A2>
struct CallCompatible<R1 (*)(A1...), R2 (*)(A2...)> {
  static constexpr bool value = sizeof...(A1) == sizeof...(A2) && same_slot<R1, R2> && (same_slot<A1, A2> && ...);
};

// FUNCTION is the exported symbol's name (the one cuda_driver.hpp passes to dlsym), not the macro.
#define SAME_SIGNATURE(FIELD, FUNCTION) \
  static_assert(CallCompatible<decltype(ours::Driver::FIELD), decltype(&FUNCTION)>::value, #FIELD " signature differs")

SAME_SIGNATURE(cuInit, cuInit);
SAME_SIGNATURE(cuGetErrorName, cuGetErrorName);
SAME_SIGNATURE(cuGetErrorString, cuGetErrorString);
SAME_SIGNATURE(cuDeviceGetCount, cuDeviceGetCount);
SAME_SIGNATURE(cuDeviceGet, cuDeviceGet);
SAME_SIGNATURE(cuDeviceGetAttribute, cuDeviceGetAttribute);
SAME_SIGNATURE(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId);
SAME_SIGNATURE(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME_SIGNATURE(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
SAME_SIGNATURE(cuCtxGetCurrent, cuCtxGetCurrent);
SAME_SIGNATURE(cuCtxSetCurrent, cuCtxSetCurrent);
SAME_SIGNATURE(cuCtxGetDevice, cuCtxGetDevice);
SAME_SIGNATURE(cuCtxSynchronize, cuCtxSynchronize);
SAME_SIGNATURE(cuMemAlloc, cuMemAlloc_v2);
SAME_SIGNATURE(cuMemFree, cuMemFree_v2);
SAME_SIGNATURE(cuMemsetD8, cuMemsetD8_v2);
SAME_SIGNATURE(cuMemsetD32, cuMemsetD32_v2);
SAME_SIGNATURE(cuMemGetAddressRange, cuMemGetAddressRange_v2);
SAME_SIGNATURE(cuPointerGetAttribute, cuPointerGetAttribute);
SAME_SIGNATURE(cuMemHostAlloc, cuMemHostAlloc);
SAME_SIGNATURE(cuMemFreeHost, cuMemFreeHost);
SAME_SIGNATURE(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2);
SAME_SIGNATURE(cuMemcpyAsync, cuMemcpyAsync);
SAME_SIGNATURE(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);
SAME_SIGNATURE(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
SAME_SIGNATURE(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
SAME_SIGNATURE(cuMemcpyHtoD, cuMemcpyHtoD_v2);
SAME_SIGNATURE(cuMemcpyDtoH, cuMemcpyDtoH_v2);
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
SAME_SIGNATURE(cuStreamCreate, cuStreamCreate);
SAME_SIGNATURE(cuStreamDestroy, cuStreamDestroy_v2);
SAME_SIGNATURE(cuStreamSynchronize, cuStreamSynchronize);
SAME_SIGNATURE(cuStreamQuery, cuStreamQuery);
SAME_SIGNATURE(cuStreamWriteValue64, cuStreamWriteValue64_v2);
SAME_SIGNATURE(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode);
SAME_SIGNATURE(cuEventCreate, cuEventCreate);
SAME_SIGNATURE(cuEventDestroy, cuEventDestroy_v2);
SAME_SIGNATURE(cuEventRecord, cuEventRecord);
SAME_SIGNATURE(cuEventQuery, cuEventQuery);
SAME_SIGNATURE(cuEventSynchronize, cuEventSynchronize);
SAME_SIGNATURE(cuEventElapsedTime, cuEventElapsedTime_v2);
SAME_SIGNATURE(cuModuleLoadData, cuModuleLoadData);
SAME_SIGNATURE(cuModuleUnload, cuModuleUnload);
SAME_SIGNATURE(cuModuleGetFunction, cuModuleGetFunction);
SAME_SIGNATURE(cuLaunchKernel, cuLaunchKernel);
