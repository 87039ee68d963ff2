// SPDX-License-Identifier: MIT
#include "gpu/completion.hpp"

#include "core/error.hpp"
#include "gpu/device.hpp"

namespace mori::io::gpu {

CompletionSlots::CompletionSlots(uint32_t count) {
  const cuda::Driver& d = cuda::driver();
  // Zeroed: sequence numbers start at 1.
  words_ = static_cast<uint64_t*>(
      alloc_mapped_host(size_t(count) * kStride * sizeof(uint64_t), &words_on_device_, "P2P completion words"));
  try {
    cuda::check(d.cuMemAlloc(&arrivals_, size_t(count) * sizeof(uint32_t)), "cuMemAlloc",
                "allocating P2P completion counters");
    clear_device_words(arrivals_, count, "P2P completion counters");  // the kernels leave them at 0
  } catch (...) {
    if (arrivals_ != 0) d.cuMemFree(arrivals_);
    d.cuMemFreeHost(words_);
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
