// SPDX-License-Identifier: MIT
// The P2P backend's resident copier (kernels/copy_batch.cu, mori_io_copy_resident): a kernel of
// `blocks` blocks that stays on the GPU while one-run transfers keep coming and takes them from a
// ring in host-mapped memory, so a transfer costs a few stores instead of a kernel launch. It
// leaves after `idle_ns` without work and is launched again by the next post. While it runs it
// holds `blocks` x 512 threads of the GPU and a device-wide synchronize waits for it to leave:
// hence opt-in (XgmiBackendConfig.resident_blocks).
#pragma once

#include <cstdint>

#include "gpu/cuda_driver.hpp"

namespace mori::io::gpu {

class ResidentCopier {
 public:
  // On the current context's device; throws Error(System) when the ring, its words, the stream or
  // the kernel cannot be had.
  ResidentCopier(cuda::CUmodule module, uint32_t blocks, uint32_t capacity, uint64_t idle_ns);
  ~ResidentCopier();  // after stop()
  ResidentCopier(const ResidentCopier&) = delete;
  ResidentCopier& operator=(const ResidentCopier&) = delete;

  // Hands one copy to the kernel, launching it if it has left; false (nothing posted) when the
  // ring entry is still in use or the launch failed. Callers serialize posts.
  bool post(uint64_t dst, uint64_t src, uint64_t size, uint64_t* ticket);
  // Whether the copy of `ticket` has finished. Safe from any thread.
  // An entry's done word only grows (its tickets are t, t + capacity, ...), so a waiter that looks
  // late, after the entry was reused, still sees its copy done.
  bool done(uint64_t ticket) const {
    return __atomic_load_n(&entries_[ticket % capacity_].done, __ATOMIC_ACQUIRE) >= ticket + 1;
  }
  cuda::CUstream stream() const { return stream_; }
  // Asks the kernel to leave and waits until it has (its posted copies finish first).
  void stop();

 private:
  struct Entry {  // mirrors ResidentEntry of copy_batch.cu
    uint64_t dst;
    uint64_t src;
    uint64_t size;
    uint64_t ticket;
    uint64_t done;
    uint64_t pad[3];
  };
  struct Control {  // host-mapped, one cache line
    uint64_t state;  // MORI_IO_RESIDENT_* of copy_batch.cu
    uint64_t quit;
    uint64_t pad[6];
  };
  static constexpr uint64_t kStopped = 0;
  static constexpr uint64_t kRunning = 1;
  static constexpr uint64_t kLeaving = 2;

  bool launch(uint64_t first_ticket);

  cuda::CUfunction kernel_ = nullptr;
  uint32_t blocks_;
  uint32_t capacity_;
  uint64_t idle_ns_;
  cuda::CUstream stream_ = nullptr;
  void* host_ = nullptr;  // Control, then the entries
  Control* control_ = nullptr;
  Entry* entries_ = nullptr;
  cuda::CUdeviceptr host_on_device_ = 0;
  cuda::CUdeviceptr words_ = 0;  // released, stop word, a 3-word mailbox and an arrival counter per entry
  uint64_t next_ticket_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace mori::io::gpu
