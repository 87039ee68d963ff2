// SPDX-License-Identifier: MIT
// Process-wide GPU state of mori-io: each device's primary context (the one torch uses too), a
// pool of mori-io's own copy streams with their events, and a pool of pinned host buffers that
// TCP transfers of GPU memory are staged through. Created on first use and never torn down: CUDA
// may already be unloading at process exit, and streams and pinned memory die with the process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/cuda_driver.hpp"

namespace mori::io::gpu {

// Visible devices; throws Error(Unsupported) naming why when there is no driver or no GPU.
int device_count();

// Throws Error(InvalidArgument) naming device and the device count unless 0 <= device < count
// (and Error(Unsupported) as device_count does).
void check_device(int device);

// The streaming multiprocessors of device (checked as check_device does); throws Error(System)
// when the driver cannot say.
int multiprocessor_count(int device);

// `bytes` of pinned, zeroed host memory that GPUs address at *device (free it with
// cuMemFreeHost); throws Error(System) naming `what` when CUDA cannot allocate or map it.
void* alloc_mapped_host(size_t bytes, cuda::CUdeviceptr* device, const std::string& what);

// Zeroes `words` 4-byte words of device memory before anything on mori-io's streams reads them:
// cuMemsetD32 runs on the legacy stream, which those non-blocking streams do not wait for.
void clear_device_words(cuda::CUdeviceptr ptr, size_t words, const std::string& what);

// Makes device's primary context current on the calling thread (a no-op when it already is).
void bind(int device);

// Restores the calling thread's current CUDA context when it goes out of scope. Calls that run
// on the application's threads bind through one of these: torch (cudart) takes its current
// device from that context, and mori.io must not switch it behind the caller's back.
class KeepCurrentContext {
 public:
  KeepCurrentContext();
  ~KeepCurrentContext();
  KeepCurrentContext(const KeepCurrentContext&) = delete;
  KeepCurrentContext& operator=(const KeepCurrentContext&) = delete;

 private:
  cuda::CUcontext saved_ = nullptr;
  bool valid_ = false;
};

struct GpuRange {
  uintptr_t alloc_base = 0;  // start of the cuMemAlloc allocation holding the range
  uint64_t alloc_size = 0;
  std::string bus_id;  // lower-case PCI bus id of the device, as MORI's MemoryDesc carries it
};

// Checks that [ptr, ptr + size) is device memory of `device` inside one allocation, else throws
// Error(InvalidArgument) saying which; returns the allocation it lies in.
GpuRange inspect(uintptr_t ptr, uint64_t size, int device);

// The CUDA IPC handle (64 bytes) of the allocation at alloc_base, or empty with *why set when the
// memory cannot be exported that way (e.g. VMM memory of torch's expandable segments).
std::string ipc_handle(int device, uintptr_t alloc_base, std::string* why);

// A copy stream of mori-io and kEvents events on device, leased from the device's pool.
struct Channel {
  static constexpr int kEvents = 8;
  int device = -1;
  cuda::CUstream stream = nullptr;
  cuda::CUevent events[kEvents] = {};
};

class ChannelLease {
 public:
  explicit ChannelLease(int device);  // binds device's context on the calling thread
  ~ChannelLease();
  ChannelLease(const ChannelLease&) = delete;
  ChannelLease& operator=(const ChannelLease&) = delete;
  Channel& operator*() const { return *channel_; }
  Channel* operator->() const { return channel_; }

 private:
  Channel* channel_;
};

// A pinned host buffer of at least `bytes`, from a pool of power-of-two size classes.
class PinnedLease {
 public:
  PinnedLease(int device, uint64_t bytes);
  ~PinnedLease();
  PinnedLease(const PinnedLease&) = delete;
  PinnedLease& operator=(const PinnedLease&) = delete;
  char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace mori::io::gpu
