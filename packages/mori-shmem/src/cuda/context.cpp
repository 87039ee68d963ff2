// SPDX-License-Identifier: MIT
#include "cuda/context.hpp"

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::shmem::cuda {

namespace {

// While any thread captures a CUDA graph in the default (global) mode, CUDA refuses "unsafe" calls
// such as cuStreamSynchronize from every other thread in global mode, and the refusal invalidates
// that capture. The work below runs on the PE's private stream, never part of a graph, and mostly
// on mori's own threads (remote transport, device proxy) while the application may be capturing
// (a CUDA graph of EP dispatch, for one), so it relaxes the calling thread for its duration.
class RelaxedCapture {
 public:
  RelaxedCapture() { driver().cuThreadExchangeStreamCaptureMode(&previous_); }
  ~RelaxedCapture() { driver().cuThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  int previous_ = kStreamCaptureModeRelaxed;
};

}  // namespace

DeviceContext::DeviceContext(int requested, int rank) {
  const Driver& d = driver();
  int count = 0;
  check(d.cuDeviceGetCount(&count), "cuDeviceGetCount", "counting GPUs");
  if (count == 0) throw_error(MORI_SHMEM_ERR_UNSUPPORTED, "the cuda backend needs a GPU and none is visible");
  CUcontext current = nullptr;
  check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent", "looking for the caller's CUDA context");
  if (requested >= 0) {
    if (requested >= count) {
      throw_error(MORI_SHMEM_ERR_CONFIG, "MORI_SHMEM_DEVICE=", requested, " is not a device: ", count,
                  " GPU(s) are visible (ordinals 0..", count - 1, ")");
    }
    ordinal_ = requested;
  } else if (current != nullptr) {
    CUdevice device = 0;
    check(d.cuCtxGetDevice(&device), "cuCtxGetDevice", "reading the caller's CUDA device");
    ordinal_ = device;
  } else {
    ordinal_ = rank % count;
  }
  check(d.cuDeviceGet(&device_, ordinal_), "cuDeviceGet", "opening the GPU");
  check(d.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain", "opening the GPU's context");
  bind();
  check(d.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate", "creating the PE's copy stream");
  check(d.cuStreamCreate(&word_stream_, kStreamNonBlocking), "cuStreamCreate", "creating the PE's word stream");
  log::emit(log::Level::Debug, "PE ", rank, " uses GPU ", ordinal_, " of ", count);
}

DeviceContext::~DeviceContext() {
  if (word_stream_ != nullptr) driver().cuStreamDestroy(word_stream_);
  if (stream_ != nullptr) driver().cuStreamDestroy(stream_);
  if (context_ != nullptr) driver().cuDevicePrimaryCtxRelease(device_);
}

void DeviceContext::bind() const {
  const Driver& d = driver();
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == kSuccess && current == context_) return;
  check(d.cuCtxSetCurrent(context_), "cuCtxSetCurrent", "making the PE's CUDA context current");
}

void DeviceContext::copy(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  bind();
  const RelaxedCapture relaxed;
  const Driver& d = driver();
  check(d.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes, stream_),
        "cuMemcpyAsync", "copying to or from the GPU heap");
  check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize", "copying to or from the GPU heap");
}

void DeviceContext::write_word(void* dst, uint64_t value) const {
  bind();
  const RelaxedCapture relaxed;
  const Driver& d = driver();
  check(d.cuStreamWriteValue64(stream_, reinterpret_cast<CUdeviceptr>(dst), value, 0), "cuStreamWriteValue64",
        "setting a signal word in the GPU heap");
  check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize", "setting a signal word in the GPU heap");
}

void DeviceContext::post_word(void* dst, uint64_t value) const {
  bind();
  const RelaxedCapture relaxed;
  check(driver().cuStreamWriteValue64(word_stream_, reinterpret_cast<CUdeviceptr>(dst), value, 0),
        "cuStreamWriteValue64", "setting a word kernels poll");
}

void DeviceContext::wait_posted_words() const {
  bind();
  const RelaxedCapture relaxed;
  check(driver().cuStreamSynchronize(word_stream_), "cuStreamSynchronize", "waiting for posted words");
}

void DeviceContext::launch_single(CUfunction f, void** params) const {
  bind();
  const RelaxedCapture relaxed;
  const Driver& d = driver();
  check(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr), "cuLaunchKernel",
        "applying a remote atomic to the GPU heap");
  check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize", "applying a remote atomic to the GPU heap");
}

}  // namespace mori::shmem::cuda
