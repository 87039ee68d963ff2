// SPDX-License-Identifier: MIT
// Can a helper thread still move bytes into GPU memory while the application's thread holds the
// CUDA context's lock waiting for the GPU (issue 32, the device proxy's small-size hang)?
//
//   nvcc -O2 -arch=sm_90 -o /tmp/ctx_lock_probe ci/gpu/ctx_lock_probe/*.cu -lcuda
//   CUDA_MODULE_LOADING=LAZY /tmp/ctx_lock_probe MODE     (MODE below)
//
// A one-thread kernel spins until a flag in GPU memory is 1 (or SPIN seconds pass). The main
// thread then launches a kernel of a module never used before: under lazy loading that launch
// holds the primary context's lock until the GPU drains, i.e. until the spinning kernel ends (the
// application thread of the hang sat in cuLaunchKernel the same way). Meanwhile a helper thread
// sets the flag, the way the device proxy lands bytes a kernel waits for:
//   primary          cuMemcpyHtoDAsync on a stream of the primary context (what mori does now)
//   private_vmm      the same on a stream of a context of its own, into cuMemCreate'd memory
//   private_static   the same into cudaMalloc'd memory of the primary context
//   private_write    cuStreamWriteValue64 from the private context into cuMemCreate'd memory
// One line: how long the helper's enqueue and completion took, how long the blocking launch took,
// and whether the kernel saw the flag ("released") or gave up ("timed out": the helper was held).
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

void launch_first_time();

extern "C" __global__ void spin_until(volatile unsigned long long* flag, long long max_cycles,
                                      unsigned long long* seen) {
  const long long t0 = clock64();
  while (*flag == 0 && clock64() - t0 < max_cycles) {
  }
  *seen = *flag;
}

#define CHECK(call)                                                               \
  do {                                                                            \
    CUresult r_ = (call);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                     \
      const char* s_ = nullptr;                                                   \
      cuGetErrorName(r_, &s_);                                                    \
      std::printf("%s failed: %s (line %d)\n", #call, s_ ? s_ : "?", __LINE__); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

static double since_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "primary";
  const double spin_s = 3.0;
  cudaSetDevice(0);
  cudaFree(nullptr);
  CUcontext primary = nullptr;
  CHECK(cuCtxGetCurrent(&primary));
  CUdevice dev = 0;
  CHECK(cuCtxGetDevice(&dev));

  CUdeviceptr flag = 0;
  if (mode == "private_vmm" || mode == "private_write") {
    CUmemAllocationProp prop;
    std::memset(&prop, 0, sizeof(prop));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle handle;
    CHECK(cuMemCreate(&handle, gran, &prop, 0));
    CHECK(cuMemAddressReserve(&flag, gran, 0, 0, 0));
    CHECK(cuMemMap(flag, gran, 0, handle, 0));
    CUmemAccessDesc access;
    std::memset(&access, 0, sizeof(access));
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemSetAccess(flag, gran, &access, 1));
  } else {
    CHECK(cuMemAlloc(&flag, 64));
  }
  CHECK(cuMemsetD8(flag, 0, 64));
  CUdeviceptr seen = 0;
  CHECK(cuMemAlloc(&seen, 8));
  CHECK(cuMemsetD8(seen, 0xff, 8));
  void* one = nullptr;
  CHECK(cuMemHostAlloc(&one, 8, CU_MEMHOSTALLOC_PORTABLE));
  *static_cast<unsigned long long*>(one) = 1;

  CUcontext helper_ctx = primary;
  if (mode != "primary") {
#if CUDA_VERSION >= 13000
    CHECK(cuCtxCreate(&helper_ctx, nullptr, 0, dev));
#else
    CHECK(cuCtxCreate(&helper_ctx, 0, dev));
#endif
    CHECK(cuCtxSetCurrent(primary));
  }
  CHECK(cuCtxSetCurrent(helper_ctx));
  CUstream helper_stream = nullptr;
  CHECK(cuStreamCreate(&helper_stream, CU_STREAM_NON_BLOCKING));
  CHECK(cuCtxSetCurrent(primary));

  cudaStream_t spin_stream = nullptr;
  cudaStreamCreateWithFlags(&spin_stream, cudaStreamNonBlocking);
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  spin_until<<<1, 1, 0, spin_stream>>>(reinterpret_cast<unsigned long long*>(flag),
                                       static_cast<long long>(spin_s * khz * 1000.0),
                                       reinterpret_cast<unsigned long long*>(seen));
  const auto start = std::chrono::steady_clock::now();

  double enqueue_ms = -1, done_ms = -1;
  CUresult helper_result = CUDA_SUCCESS;
  std::thread helper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the main thread is in the launch by then
    cuCtxSetCurrent(helper_ctx);
    const auto t0 = std::chrono::steady_clock::now();
    helper_result = mode == "private_write" ? cuStreamWriteValue64(helper_stream, flag, 1, 0)
                                            : cuMemcpyHtoDAsync(flag, one, 8, helper_stream);
    enqueue_ms = since_ms(t0);
    if (helper_result != CUDA_SUCCESS) return;
    while (cuStreamQuery(helper_stream) == CUDA_ERROR_NOT_READY) {
    }
    done_ms = since_ms(t0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto launch0 = std::chrono::steady_clock::now();
  launch_first_time();
  const double launch_ms = since_ms(launch0);
  helper.join();
  cudaDeviceSynchronize();
  unsigned long long seen_host = 0;
  CHECK(cuMemcpyDtoH(&seen_host, seen, 8));
  const char* err = nullptr;
  cuGetErrorName(helper_result, &err);
  std::printf("%-15s helper %s: enqueue %.3f ms, done %.3f ms; first-time launch %.1f ms; kernel %s (%.0f ms in all)\n",
              mode.c_str(), err ? err : "?", enqueue_ms, done_ms, launch_ms,
              seen_host == 1 ? "released" : "timed out", since_ms(start));
  return 0;
}
