// SPDX-License-Identifier: MIT
#include "cuda/context.hpp"

#include <chrono>

#include "core/back_off.hpp"
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

DeviceContext::DeviceContext(int requested, int rank, double timeout_s, bool own_work_context)
    : timeout_s_(timeout_s) {
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
  work_context_ = context_;
  try {
    // cuCtxCreate makes the new context current: the primary one is made current again below.
    const CUresult created = own_work_context ? d.cuCtxCreate(&work_context_, 0, device_) : kSuccess;
    if (created != kSuccess) {
      // Under MPS every context takes hardware queues from one pool that many PEs on one GPU can
      // exhaust: the proxy then shares the application's context, as it did before it had one.
      work_context_ = context_;
      const char* name = nullptr;
      d.cuGetErrorName(created, &name);
      log::emit(log::Level::Warning, "PE ", rank, ": no CUDA context of its own for the device proxy (cuCtxCreate: ",
                name != nullptr ? name : "unknown error", "); it shares the application's, whose kernel launches "
                "can then hold it back (docs/user-guide/shmem.md, CUDA backend notes)");
    }
    const WorkScope work(*this);
    check(d.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate", "creating the PE's copy stream");
    check(d.cuStreamCreate(&word_stream_, kStreamNonBlocking), "cuStreamCreate", "creating the PE's word stream");
  } catch (...) {
    release();
    throw;
  }
  bind();
  log::emit(log::Level::Debug, "PE ", rank, " uses GPU ", ordinal_, " of ", count,
            work_context_ != context_ ? ", its device proxy a CUDA context of its own" : "");
}

DeviceContext::~DeviceContext() { release(); }

void DeviceContext::release() noexcept {
  const Driver& d = driver();
  CUcontext previous = nullptr;
  d.cuCtxGetCurrent(&previous);
  if (work_context_ != nullptr && d.cuCtxSetCurrent(work_context_) == kSuccess) {
    if (word_stream_ != nullptr) d.cuStreamDestroy(word_stream_);
    if (stream_ != nullptr) d.cuStreamDestroy(stream_);
  }
  word_stream_ = stream_ = nullptr;
  d.cuCtxSetCurrent(previous == work_context_ ? context_ : previous);
  if (work_context_ != nullptr && work_context_ != context_) d.cuCtxDestroy(work_context_);
  work_context_ = nullptr;
  if (context_ != nullptr) d.cuDevicePrimaryCtxRelease(device_);
  context_ = nullptr;
}

DeviceContext::WorkScope::WorkScope(const DeviceContext& context) {
  const Driver& d = driver();
  check(d.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent", "looking for the caller's CUDA context");
  if (previous_ == context.work_context_) return;
  check(d.cuCtxSetCurrent(context.work_context_), "cuCtxSetCurrent", "making mori-shmem's CUDA context current");
  switched_ = true;
}

DeviceContext::WorkScope::~WorkScope() {
  if (switched_) driver().cuCtxSetCurrent(previous_);
}

void DeviceContext::bind() const {
  const Driver& d = driver();
  CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == kSuccess && current == context_) return;
  check(d.cuCtxSetCurrent(context_), "cuCtxSetCurrent", "making the PE's CUDA context current");
}

void DeviceContext::copy(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  copy_async(dst, src, bytes, stream_);
  finish_stream(stream_, "copying to or from the GPU heap");
}

void DeviceContext::write_word(void* dst, uint64_t value) const {
  write_word_async(dst, value, stream_);
  finish_stream(stream_, "setting a signal word in the GPU heap");
}

void DeviceContext::post_word(void* dst, uint64_t value) const {
  const WorkScope work(*this);
  const RelaxedCapture relaxed;
  check(driver().cuStreamWriteValue64(word_stream_, reinterpret_cast<CUdeviceptr>(dst), value, 0),
        "cuStreamWriteValue64", "setting a word kernels poll");
}

void DeviceContext::wait_posted_words() const {
  const WorkScope work(*this);
  const RelaxedCapture relaxed;
  finish(word_stream_, "waiting for posted words");
}

void DeviceContext::launch_single(CUfunction f, void** params) const {
  const WorkScope work(*this);
  const RelaxedCapture relaxed;
  const Driver& d = driver();
  check(d.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream_, params, nullptr), "cuLaunchKernel",
        "applying a remote atomic to the GPU heap");
  finish(stream_, "applying a remote atomic to the GPU heap");
}

CUstream DeviceContext::create_stream() const {
  const WorkScope work(*this);
  CUstream stream = nullptr;
  check(driver().cuStreamCreate(&stream, kStreamNonBlocking), "cuStreamCreate", "creating a staging copy stream");
  return stream;
}

void DeviceContext::destroy_stream(CUstream stream) const noexcept {
  if (stream == nullptr) return;
  try {
    const WorkScope work(*this);
    driver().cuStreamDestroy(stream);
  } catch (const std::exception& e) {
    log::emit(log::Level::Warning, "could not destroy a staging copy stream: ", e.what());
  }
}

void DeviceContext::copy_async(void* dst, const void* src, size_t bytes, CUstream stream) const {
  if (bytes == 0) return;
  const WorkScope work(*this);
  const RelaxedCapture relaxed;
  check(driver().cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), bytes,
                               stream),
        "cuMemcpyAsync", "copying to or from the GPU heap");
}

void DeviceContext::write_word_async(void* dst, uint64_t value, CUstream stream) const {
  const WorkScope work(*this);
  const RelaxedCapture relaxed;
  check(driver().cuStreamWriteValue64(stream, reinterpret_cast<CUdeviceptr>(dst), value, 0), "cuStreamWriteValue64",
        "setting a signal word in the GPU heap");
}

void DeviceContext::finish_stream(CUstream stream, const char* what) const {
  const WorkScope work(*this);
  const RelaxedCapture relaxed;
  finish(stream, what);
}

bool DeviceContext::stream_done(CUstream stream, const char* what) const {
  const WorkScope work(*this);
  const CUresult result = driver().cuStreamQuery(stream);
  if (result != kErrorNotReady) check(result, "cuStreamQuery", what);
  return result == kSuccess;
}

void DeviceContext::finish(CUstream stream, const char* what) const {
  const Driver& d = driver();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (uint64_t round = 0;; ++round) {
    const CUresult result = d.cuStreamQuery(stream);
    if (result == kSuccess) return;
    if (result != kErrorNotReady) check(result, "cuStreamQuery", what);
    // A copy takes microseconds: spin that long before giving the CPU away, and look at the clock
    // only now and then.
    if (round % 1024 == 1023 && std::chrono::steady_clock::now() > deadline) {
      throw_error(MORI_SHMEM_ERR_TIMEOUT, what, ": the GPU did not run mori-shmem's work on its stream within ",
                  timeout_s_, " s (MORI_SHMEM_WAIT_TIMEOUT; docs/user-guide/shmem.md, CUDA backend notes)");
    }
    back_off(round, 2000, 20000);
  }
}

}  // namespace mori::shmem::cuda
