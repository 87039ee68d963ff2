// SPDX-License-Identifier: MIT
#include "gpu/resident.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "gpu/copy_kernels.hpp"
#include "gpu/device.hpp"

namespace mori::io::gpu {

ResidentCopier::ResidentCopier(cuda::CUmodule module, uint32_t blocks, uint32_t capacity, uint64_t idle_ns)
    : blocks_(blocks), capacity_(capacity), idle_ns_(idle_ns) {
  const cuda::Driver& d = cuda::driver();
  cuda::check(d.cuModuleGetFunction(&kernel_, module, "mori_io_copy_resident"), "cuModuleGetFunction",
              "finding the P2P resident copier");
  // Zeroed: state STOPPED, no ticket posted or done.
  host_ = alloc_mapped_host(sizeof(Control) + size_t(capacity) * sizeof(Entry), &host_on_device_,
                            "the P2P resident copier's ring");
  control_ = static_cast<Control*>(host_);
  entries_ = reinterpret_cast<Entry*>(control_ + 1);
  try {
    const size_t word_bytes = (2 + 3 * size_t(capacity)) * sizeof(uint64_t) + size_t(capacity) * sizeof(uint32_t);
    cuda::check(d.cuMemAlloc(&words_, word_bytes), "cuMemAlloc", "allocating the P2P resident copier's counters");
    // Released ticket 0, stop word 0 (generations start at 1), mailboxes, arrival counters 0.
    clear_device_words(words_, word_bytes / 4, "the P2P resident copier's counters");
    cuda::check(d.cuStreamCreate(&stream_, cuda::kStreamNonBlocking), "cuStreamCreate",
                "creating the P2P resident copier's stream");
  } catch (...) {
    if (words_ != 0) d.cuMemFree(words_);
    d.cuMemFreeHost(host_);
    throw;
  }
}

ResidentCopier::~ResidentCopier() {
  const cuda::Driver& d = cuda::driver();
  d.cuStreamDestroy(stream_);
  d.cuMemFree(words_);
  d.cuMemFreeHost(host_);
}

bool ResidentCopier::launch(uint64_t first_ticket) {
  cuda::CUdeviceptr entries = host_on_device_ + sizeof(Control);
  cuda::CUdeviceptr control = host_on_device_;
  cuda::CUdeviceptr released = words_;
  cuda::CUdeviceptr stop_word = words_ + sizeof(uint64_t);
  cuda::CUdeviceptr mailboxes = words_ + 2 * sizeof(uint64_t);
  cuda::CUdeviceptr arrivals = mailboxes + 3 * sizeof(uint64_t) * capacity_;
  uint32_t capacity = capacity_;
  uint64_t first = first_ticket;
  uint64_t generation = ++generation_;
  uint64_t idle = idle_ns_;
  void* params[] = {&entries,  &control, &released, &stop_word,  &arrivals,
                    &capacity, &mailboxes, &first,  &generation, &idle};
  __atomic_store_n(&control_->state, kRunning, __ATOMIC_RELEASE);  // before the kernel can leave
  const cuda::CUresult r =
      cuda::driver().cuLaunchKernel(kernel_, blocks_, 1, 1, kCopyThreads, 1, 1, 0, stream_, params, nullptr);
  if (r == cuda::kSuccess) {
    MORI_IO_LOG(Debug, "P2P resident copier launched at ticket " << first_ticket << " (generation " << generation
                                                                    << ")");
    return true;
  }
  __atomic_store_n(&control_->state, kStopped, __ATOMIC_RELEASE);
  return false;
}

bool ResidentCopier::post(uint64_t dst, uint64_t src, uint64_t size, uint64_t* ticket) {
  const uint64_t t = next_ticket_;
  Entry& e = entries_[t % capacity_];
  // The entry's previous ticket must be done: every block has read it by then.
  if (t >= capacity_ && __atomic_load_n(&e.done, __ATOMIC_ACQUIRE) < t - capacity_ + 1) return false;
  e.dst = dst;
  e.src = src;
  e.size = size;
  __atomic_store_n(&e.ticket, t + 1, __ATOMIC_RELEASE);
  // Post, then look at the state (the kernel announces LEAVING, then looks at the ticket): with a
  // full fence on both sides, at least one of the two sees the other's store.
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  uint64_t state = __atomic_load_n(&control_->state, __ATOMIC_ACQUIRE);
  while (state == kLeaving) state = __atomic_load_n(&control_->state, __ATOMIC_ACQUIRE);  // decided within ~1 us
  if (state == kStopped && !launch(t)) return false;  // entry t is rewritten by the next post
  next_ticket_ = t + 1;
  *ticket = t;
  return true;
}

void ResidentCopier::stop() {
  __atomic_store_n(&control_->quit, 1, __ATOMIC_RELEASE);
  cuda::driver().cuStreamSynchronize(stream_);
}

}  // namespace mori::io::gpu
