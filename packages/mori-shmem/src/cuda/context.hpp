// SPDX-License-Identifier: MIT
// The GPU a PE runs on and the CUDA context its memory belongs to. mori uses the device's primary
// context, the one the CUDA runtime (and so PyTorch) uses, so that heap pointers are valid in
// torch tensors and in kernels launched by any of them.
#pragma once

#include "cuda/cuda_driver.hpp"

namespace mori::shmem::cuda {

// While any thread captures a CUDA graph in the default (global) mode, CUDA refuses "unsafe" calls
// (cuStreamSynchronize, cuMemHostAlloc, ...) from every other thread in global mode, and the
// refusal invalidates that capture. mori's own work runs on its private streams, never part of a
// graph, and mostly on its own threads (remote transport, device proxy) while the application may
// be capturing (a CUDA graph of EP dispatch, for one), so it relaxes the calling thread for the
// duration of each such call.
class RelaxedCapture {
 public:
  RelaxedCapture() { driver().cuThreadExchangeStreamCaptureMode(&previous_); }
  ~RelaxedCapture() { driver().cuThreadExchangeStreamCaptureMode(&previous_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  int previous_ = kStreamCaptureModeRelaxed;
};

class DeviceContext {
 public:
  // Picks the device: `requested` >= 0 (MORI_SHMEM_DEVICE), else the device of the context
  // current on this thread, else rank % device count; retains its primary context.
  DeviceContext(int requested, int rank);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int ordinal() const { return ordinal_; }
  // Makes the context current on the calling thread (host calls may come from any thread).
  void bind() const;
  // Copies between any two addresses (host or device, UVA) and returns once the bytes are in place.
  // Uses the PE's own non-blocking stream: the legacy default stream would wait for every kernel
  // of the context, and a kernel spinning on a flag that this very copy sets would deadlock.
  void copy(void* dst, const void* src, size_t bytes) const;
  // Stores the 8-byte-aligned word at dst (device memory) from the GPU's front end, after a fence
  // that orders every copy before it on the same stream, and returns once it is done. Unlike a
  // kernel it needs no free SM, so it lands even while spinning grids occupy all of them.
  void write_word(void* dst, uint64_t value) const;
  // Runs a one-thread launch of f on the same stream and returns when it has finished.
  void launch_single(CUfunction f, void** params) const;

 private:
  CUdevice device_ = 0;
  int ordinal_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
};

// A non-blocking stream of its own, for work that must neither wait behind the PE's other copies
// nor make them wait: a staging lane of the remote transport overlapping its copies with the
// socket, the device proxy's completion words. Nothing here waits unless synchronize() is called.
class CopyStream {
 public:
  explicit CopyStream(const DeviceContext& context);
  ~CopyStream();
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  void copy_async(void* dst, const void* src, size_t bytes) const;
  // The 8-byte-aligned device word at dst becomes value once the work before it on this stream is
  // done (a front-end write: no SM needed).
  void write_word_async(void* dst, uint64_t value) const;
  void synchronize() const;

 private:
  const DeviceContext& context_;
  CUstream stream_ = nullptr;
};

}  // namespace mori::shmem::cuda
