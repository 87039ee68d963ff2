// SPDX-License-Identifier: MIT
#include "gpu/device.hpp"

#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"

namespace mori::io::gpu {

namespace {

constexpr uint64_t kSmallestPinned = 1ull << 20;
constexpr size_t kPinnedPerClass = 8;  // more than this many idle buffers of one size are freed

struct Device {
  cuda::CUcontext context = nullptr;
  std::vector<std::unique_ptr<Channel>> idle;
};

struct State {
  std::mutex mutex;
  int count = -1;
  std::map<int, Device> devices;
  std::map<uint64_t, std::vector<char*>> pinned;  // capacity -> idle buffers
};

State& state() {
  static auto* s = new State();  // leaked on purpose, see device.hpp
  return *s;
}

// Every transfer binds its device: after the first lookup a device's context is read without the
// state lock or the driver's device count.
constexpr int kCachedDevices = 64;
std::atomic<cuda::CUcontext> cached_contexts[kCachedDevices];

cuda::CUcontext context_of(int device) {
  if (device >= 0 && device < kCachedDevices) {
    if (cuda::CUcontext cached = cached_contexts[device].load(std::memory_order_acquire)) return cached;
  }
  check_device(device);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Device& d = s.devices[device];
  if (d.context == nullptr) {
    const cuda::Driver& drv = cuda::driver();
    cuda::CUdevice handle = 0;
    cuda::check(drv.cuDeviceGet(&handle, device), "cuDeviceGet", "opening GPU " + std::to_string(device));
    cuda::check(drv.cuDevicePrimaryCtxRetain(&d.context, handle), "cuDevicePrimaryCtxRetain",
                "opening the context of GPU " + std::to_string(device));
    if (device < kCachedDevices) cached_contexts[device].store(d.context, std::memory_order_release);
  }
  return d.context;
}

}  // namespace

int device_count() {
  const std::string& why = cuda::unavailable_reason();
  if (!why.empty()) throw Error(Code::Unsupported, "GPU memory needs the CUDA driver: " + why);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.count < 0) {
    int count = 0;
    cuda::check(cuda::driver().cuDeviceGetCount(&count), "cuDeviceGetCount", "counting GPUs");
    s.count = count;
  }
  if (s.count == 0) throw Error(Code::Unsupported, "GPU memory needs a GPU and the CUDA driver sees none");
  return s.count;
}

void check_device(int device) {
  int count = device_count();
  if (device < 0 || device >= count) {
    throw Error(Code::InvalidArgument, "device_id=" + std::to_string(device) + " is not a GPU: " +
                                           std::to_string(count) + " device(s) are visible (ordinals 0.." +
                                           std::to_string(count - 1) + ")");
  }
}

int multiprocessor_count(int device) {
  check_device(device);
  const cuda::Driver& d = cuda::driver();
  cuda::CUdevice handle = 0;
  cuda::check(d.cuDeviceGet(&handle, device), "cuDeviceGet", "opening GPU " + std::to_string(device));
  int sms = 0;
  cuda::check(d.cuDeviceGetAttribute(&sms, cuda::kAttrMultiprocessorCount, handle), "cuDeviceGetAttribute",
              "counting the SMs of GPU " + std::to_string(device));
  return sms;
}

void* alloc_mapped_host(size_t bytes, cuda::CUdeviceptr* device, const std::string& what) {
  const cuda::Driver& d = cuda::driver();
  void* host = nullptr;
  cuda::check(d.cuMemHostAlloc(&host, bytes, cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
              "cuMemHostAlloc", "allocating " + what);
  const cuda::CUresult r = d.cuMemHostGetDevicePointer(device, host, 0);
  if (r != cuda::kSuccess) {
    d.cuMemFreeHost(host);
    cuda::check(r, "cuMemHostGetDevicePointer", "mapping " + what);
  }
  std::memset(host, 0, bytes);
  return host;
}

void clear_device_words(cuda::CUdeviceptr ptr, size_t words, const std::string& what) {
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.cuMemsetD32(ptr, 0, words), "cuMemsetD32", "clearing " + what);
  cuda::check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize", "clearing " + what);
}

void bind(int device) {
  cuda::CUcontext context = context_of(device);
  const cuda::Driver& d = cuda::driver();
  cuda::CUcontext current = nullptr;
  if (d.cuCtxGetCurrent(&current) == cuda::kSuccess && current == context) return;
  cuda::check(d.cuCtxSetCurrent(context), "cuCtxSetCurrent", "making GPU " + std::to_string(device) + " current");
}

KeepCurrentContext::KeepCurrentContext() {
  if (!cuda::unavailable_reason().empty()) return;
  valid_ = cuda::driver().cuCtxGetCurrent(&saved_) == cuda::kSuccess;
}

KeepCurrentContext::~KeepCurrentContext() {
  if (!valid_) return;
  cuda::CUcontext current = nullptr;
  const cuda::Driver& d = cuda::driver();
  if (d.cuCtxGetCurrent(&current) == cuda::kSuccess && current != saved_) d.cuCtxSetCurrent(saved_);
}

GpuRange inspect(uintptr_t ptr, uint64_t size, int device) {
  KeepCurrentContext keep;
  bind(device);
  const cuda::Driver& d = cuda::driver();
  const auto dptr = static_cast<cuda::CUdeviceptr>(ptr);
  unsigned type = 0;
  if (d.cuPointerGetAttribute(&type, cuda::kPointerAttrMemoryType, dptr) != cuda::kSuccess ||
      type != cuda::kMemoryTypeDevice) {
    throw Error(Code::InvalidArgument, "ptr=" + std::to_string(ptr) + " is not GPU device memory (mem_loc=GPU)");
  }
  int ordinal = -1;
  cuda::check(d.cuPointerGetAttribute(&ordinal, cuda::kPointerAttrDeviceOrdinal, dptr), "cuPointerGetAttribute",
              "finding the device of ptr=" + std::to_string(ptr));
  if (ordinal != device) {
    throw Error(Code::InvalidArgument, "device_id=" + std::to_string(device) + " but ptr=" + std::to_string(ptr) +
                                           " is memory of GPU " + std::to_string(ordinal));
  }
  GpuRange range;
  cuda::CUdeviceptr base = 0;
  size_t alloc = 0;
  cuda::check(d.cuMemGetAddressRange(&base, &alloc, dptr), "cuMemGetAddressRange",
              "finding the allocation of ptr=" + std::to_string(ptr));
  range.alloc_base = static_cast<uintptr_t>(base);
  range.alloc_size = alloc;
  if (size > range.alloc_base + alloc - ptr) {
    throw Error(Code::InvalidArgument, "size=" + std::to_string(size) + " runs past the end of the GPU allocation at ptr=" +
                                           std::to_string(ptr) + " (" + std::to_string(range.alloc_base + alloc - ptr) +
                                           " bytes left in it)");
  }
  char bus[32] = {};
  cuda::CUdevice handle = 0;
  if (d.cuDeviceGet(&handle, device) == cuda::kSuccess &&
      d.cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, handle) == cuda::kSuccess) {
    for (char* c = bus; *c != '\0'; ++c) *c = static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
    range.bus_id = bus;
  }
  return range;
}

std::string ipc_handle(int device, uintptr_t alloc_base, std::string* why) {
  KeepCurrentContext keep;
  bind(device);
  cuda::CUipcMemHandle handle{};
  cuda::CUresult r = cuda::driver().cuIpcGetMemHandle(&handle, static_cast<cuda::CUdeviceptr>(alloc_base));
  if (r != cuda::kSuccess) {
    *why = cuda::describe(r, "cuIpcGetMemHandle");
    return std::string();
  }
  return std::string(handle.reserved, sizeof(handle.reserved));
}

ChannelLease::ChannelLease(int device) {
  bind(device);
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto& idle = s.devices[device].idle;
    if (!idle.empty()) {
      channel_ = idle.back().release();
      idle.pop_back();
      return;
    }
  }
  auto channel = std::make_unique<Channel>();
  channel->device = device;
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.cuStreamCreate(&channel->stream, cuda::kStreamNonBlocking), "cuStreamCreate",
              "creating a copy stream on GPU " + std::to_string(device));
  for (auto& event : channel->events) {
    cuda::check(d.cuEventCreate(&event, cuda::kEventDisableTiming), "cuEventCreate",
                "creating a copy event on GPU " + std::to_string(device));
  }
  channel_ = channel.release();
}

ChannelLease::~ChannelLease() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.devices[channel_->device].idle.emplace_back(channel_);
}

PinnedLease::PinnedLease(int device, uint64_t bytes) {
  capacity_ = kSmallestPinned;
  while (capacity_ < bytes) capacity_ <<= 1;
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto& idle = s.pinned[capacity_];
    if (!idle.empty()) {
      data_ = idle.back();
      idle.pop_back();
      return;
    }
  }
  bind(device);
  void* p = nullptr;
  // Portable: a buffer staged for one GPU's context may later serve another GPU's.
  cuda::check(cuda::driver().cuMemHostAlloc(&p, capacity_, cuda::kMemHostAllocPortable), "cuMemHostAlloc",
              "allocating " + std::to_string(capacity_) + " bytes of pinned staging memory");
  data_ = static_cast<char*>(p);
}

PinnedLease::~PinnedLease() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto& idle = s.pinned[capacity_];
    if (idle.size() < kPinnedPerClass) {
      idle.push_back(data_);
      return;
    }
  }
  cuda::driver().cuMemFreeHost(data_);
}

}  // namespace mori::io::gpu
