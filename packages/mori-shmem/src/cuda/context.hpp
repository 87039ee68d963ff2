// SPDX-License-Identifier: MIT
// The GPU a PE runs on and the CUDA context its memory belongs to. mori uses the device's primary
// context, the one the CUDA runtime (and so PyTorch) uses, so that heap pointers are valid in
// torch tensors and in kernels launched by any of them.
#pragma once

#include "cuda/cuda_driver.hpp"

namespace mori::shmem::cuda {

class DeviceContext {
 public:
  // Picks the device: `requested` >= 0 (MORI_SHMEM_DEVICE), else the device of the context
  // current on this thread, else rank % device count; retains its primary context. Each wait for
  // the GPU below gives up with MORI_SHMEM_ERR_TIMEOUT after timeout_s. With own_work_context
  // (the PE serves a device proxy) the copies, words and atomics below run in a CUDA context of
  // their own: see WorkScope.
  DeviceContext(int requested, int rank, double timeout_s, bool own_work_context);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int ordinal() const { return ordinal_; }
  // Makes the primary context current on the calling thread (host calls may come from any thread).
  void bind() const;

  // The work context current on the calling thread for the scope's life, the caller's own after.
  // A thread that sits in a launch which waits for the GPU (a first launch under lazy loading, a
  // full launch queue) holds its context's lock; any CUDA call of another thread in that context
  // waits for it. When the GPU is busy with kernels waiting for the device proxy, and the proxy
  // needs a CUDA call to serve them, nothing moves again (issue 32's small-size hang). A context of
  // the proxy's own has a lock of its own: its copies and stream writes go through while the
  // application's thread waits, for memory that is not tied to the application's context
  // (cuMemCreate'd, pinned host). Measured: ci/gpu/ctx_lock_probe.
  class WorkScope {
   public:
    explicit WorkScope(const DeviceContext& context);
    ~WorkScope();
    WorkScope(const WorkScope&) = delete;
    WorkScope& operator=(const WorkScope&) = delete;

   private:
    CUcontext previous_ = nullptr;
    bool switched_ = false;
  };

  // Copies between any two addresses (host or device, UVA) and returns once the bytes are in place.
  // Uses the PE's own non-blocking stream: the legacy default stream would wait for every kernel
  // of the context, and a kernel spinning on a flag that this very copy sets would deadlock.
  void copy(void* dst, const void* src, size_t bytes) const;
  // Stores the 8-byte-aligned word at dst (device memory) from the GPU's front end, after a fence
  // that orders every copy before it on the same stream, and returns once it is done. Unlike a
  // kernel it needs no free SM, so it lands even while spinning grids occupy all of them.
  void write_word(void* dst, uint64_t value) const;
  // Queues the same store on a stream of its own and returns at once: for words kernels poll,
  // which no copy or launch queued on the PE's stream may hold back (a one-thread launch waits
  // for a free SM, and the SMs may be held by kernels waiting for the word). Stores land in order.
  void post_word(void* dst, uint64_t value) const;
  // Returns once every posted word has landed.
  void wait_posted_words() const;
  // Runs a one-thread launch of f (a function of a module loaded in a WorkScope) on the same
  // stream and returns when it has finished.
  void launch_single(CUfunction f, void** params) const;

  // Streams of the work context besides the PE's own, for copies that overlap one another (the
  // remote transport's staging slots): copy_async queues and returns at once, finish_stream
  // returns once everything queued on the stream has run (bounded like every wait here).
  CUstream create_stream() const;
  void destroy_stream(CUstream stream) const noexcept;
  void copy_async(void* dst, const void* src, size_t bytes, CUstream stream) const;
  // write_word's fenced store, queued on `stream` (after what is queued there) without waiting.
  void write_word_async(void* dst, uint64_t value, CUstream stream) const;
  void finish_stream(CUstream stream, const char* what) const;
  // Whether everything queued on the stream has run; throws if the stream failed.
  bool stream_done(CUstream stream, const char* what) const;
  double timeout_s() const { return timeout_s_; }

 private:
  void release() noexcept;
  // Returns once everything queued on stream has run. Polls rather than cuStreamSynchronize, so
  // that work the GPU never runs (NOTE [device proxy]) ends in an error naming `what`, not a hang.
  void finish(CUstream stream, const char* what) const;

  double timeout_s_;
  CUdevice device_ = 0;
  int ordinal_ = 0;
  CUcontext context_ = nullptr;
  CUcontext work_context_ = nullptr;  // = context_ unless own_work_context
  CUstream stream_ = nullptr;
  CUstream word_stream_ = nullptr;
};

}  // namespace mori::shmem::cuda
