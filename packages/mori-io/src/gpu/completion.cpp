// SPDX-License-Identifier: MIT
#include "gpu/completion.hpp"

#include <cstring>

#include "engine/error.hpp"

namespace mori::io::gpu {

CompletionSlots::CompletionSlots(uint32_t count) {
  const cuda::Driver& d = cuda::driver();
  const size_t bytes = size_t(count) * kStride * sizeof(uint64_t);
  void* host = nullptr;
  cuda::check(d.cuMemHostAlloc(&host, bytes, cuda::kMemHostAllocPortable | cuda::kMemHostAllocDeviceMap),
              "cuMemHostAlloc", "allocating P2P completion words");
  words_ = static_cast<uint64_t*>(host);
  std::memset(words_, 0, bytes);  // sequence numbers start at 1
  try {
    cuda::check(d.cuMemHostGetDevicePointer(&words_on_device_, host, 0), "cuMemHostGetDevicePointer",
                "mapping P2P completion words");
    cuda::check(d.cuMemAlloc(&arrivals_, size_t(count) * sizeof(uint32_t)), "cuMemAlloc",
                "allocating P2P completion counters");
    // The kernels leave a counter at zero when they finish with it. The memset runs on the
    // legacy stream, which mori-io's non-blocking streams do not wait for: wait here.
    cuda::check(d.cuMemsetD32(arrivals_, 0, count), "cuMemsetD32", "clearing P2P completion counters");
    cuda::check(d.cuStreamSynchronize(nullptr), "cuStreamSynchronize", "clearing P2P completion counters");
  } catch (...) {
    if (arrivals_ != 0) d.cuMemFree(arrivals_);
    d.cuMemFreeHost(host);
    throw;
  }
  free_.reserve(count);
  for (uint32_t i = count; i > 0; --i) free_.push_back(i - 1);
}

CompletionSlots::~CompletionSlots() {
  const cuda::Driver& d = cuda::driver();
  d.cuMemFree(arrivals_);
  d.cuMemFreeHost(words_);
}

bool CompletionSlots::acquire(uint32_t* index, DoneSignal* signal) {
  if (free_.empty()) return false;
  *index = free_.back();
  free_.pop_back();
  signal->arrivals = arrivals_ + *index * sizeof(uint32_t);
  signal->flag = words_on_device_ + *index * kStride * sizeof(uint64_t);
  signal->seq = next_seq_++;
  return true;
}

}  // namespace mori::io::gpu
