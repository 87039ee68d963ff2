// SPDX-License-Identifier: MIT
// Compiled (never run) by test_cuda_abi.py against the real cuda.h: the hand-written driver
// declarations of src/gpu/cuda_driver.hpp must match it exactly, since mori.io._C is built
// without CUDA headers.
#include <cuda.h>

#include <type_traits>

#include "gpu/cuda_driver.hpp"

namespace ours = mori::io::cuda;

static_assert(sizeof(ours::CUipcMemHandle) == sizeof(CUipcMemHandle), "CUipcMemHandle size differs");
static_assert(alignof(ours::CUipcMemHandle) == alignof(CUipcMemHandle), "CUipcMemHandle alignment differs");
static_assert(sizeof(ours::CUdeviceptr) == sizeof(CUdeviceptr));

static_assert(ours::kSuccess == CUDA_SUCCESS);
static_assert(ours::kErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(ours::kMemHostAllocPortable == CU_MEMHOSTALLOC_PORTABLE);
static_assert(ours::kMemHostAllocDeviceMap == CU_MEMHOSTALLOC_DEVICEMAP);
static_assert(ours::kIpcLazyEnablePeerAccess == CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
static_assert(ours::kStreamNonBlocking == CU_STREAM_NON_BLOCKING);
static_assert(ours::kEventDefault == CU_EVENT_DEFAULT);
static_assert(ours::kEventDisableTiming == CU_EVENT_DISABLE_TIMING);
static_assert(ours::kPointerAttrMemoryType == CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
static_assert(ours::kPointerAttrDeviceOrdinal == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
static_assert(ours::kMemoryTypeDevice == CU_MEMORYTYPE_DEVICE);
static_assert(ours::kDeviceAttrMultiprocessorCount == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);

// Each function pointer must be call-compatible with the versioned entry point it is bound to
// (cuda_driver.cpp): the same number of parameters, each of the same size and pointer-ness.
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
SAME_SIGNATURE(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId);
SAME_SIGNATURE(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME_SIGNATURE(cuCtxGetCurrent, cuCtxGetCurrent);
SAME_SIGNATURE(cuCtxSetCurrent, cuCtxSetCurrent);
SAME_SIGNATURE(cuDeviceGetAttribute, cuDeviceGetAttribute);
SAME_SIGNATURE(cuMemAlloc, cuMemAlloc_v2);
SAME_SIGNATURE(cuMemFree, cuMemFree_v2);
SAME_SIGNATURE(cuMemsetD32, cuMemsetD32_v2);
SAME_SIGNATURE(cuMemHostAlloc, cuMemHostAlloc);
SAME_SIGNATURE(cuMemFreeHost, cuMemFreeHost);
SAME_SIGNATURE(cuMemGetAddressRange, cuMemGetAddressRange_v2);
SAME_SIGNATURE(cuPointerGetAttribute, cuPointerGetAttribute);
SAME_SIGNATURE(cuStreamCreate, cuStreamCreate);
SAME_SIGNATURE(cuStreamDestroy, cuStreamDestroy_v2);
SAME_SIGNATURE(cuStreamSynchronize, cuStreamSynchronize);
SAME_SIGNATURE(cuEventCreate, cuEventCreate);
SAME_SIGNATURE(cuEventDestroy, cuEventDestroy_v2);
SAME_SIGNATURE(cuEventRecord, cuEventRecord);
SAME_SIGNATURE(cuEventQuery, cuEventQuery);
SAME_SIGNATURE(cuEventSynchronize, cuEventSynchronize);
SAME_SIGNATURE(cuEventElapsedTime, cuEventElapsedTime_v2);
SAME_SIGNATURE(cuMemcpyAsync, cuMemcpyAsync);
SAME_SIGNATURE(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2);
SAME_SIGNATURE(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
SAME_SIGNATURE(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
SAME_SIGNATURE(cuIpcGetMemHandle, cuIpcGetMemHandle);
SAME_SIGNATURE(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2);
SAME_SIGNATURE(cuIpcCloseMemHandle, cuIpcCloseMemHandle);
SAME_SIGNATURE(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2);
SAME_SIGNATURE(cuModuleLoadData, cuModuleLoadData);
SAME_SIGNATURE(cuModuleGetFunction, cuModuleGetFunction);
SAME_SIGNATURE(cuLaunchKernel, cuLaunchKernel);
