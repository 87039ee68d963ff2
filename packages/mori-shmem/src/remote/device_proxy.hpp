// SPDX-License-Identifier: MIT
// The host half of NOTE [device proxy] (mori_shmem/proxy_ring.h): a thread per PE that carries out
// the requests kernels post for PEs they cannot load/store, over the remote transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "cuda/context.hpp"
#include "mori_shmem/proxy_ring.h"
#include "remote/conduit.hpp"
#include "remote/gpu_remote_io.hpp"

namespace mori::shmem::remote {

class DeviceProxy {
 public:
  // sync_words: GPU memory laid out as the heap's sync words (device_state.h), whose tail and error
  // words the proxy uses: this PE's heap, or a remote region's proxy words.
  DeviceProxy(const cuda::DeviceContext& context, Conduit& conduit, GpuRemoteIo& io, uint8_t* sync_words,
              int rank, double timeout_s);
  ~DeviceProxy();
  DeviceProxy(const DeviceProxy&) = delete;
  DeviceProxy& operator=(const DeviceProxy&) = delete;

  // The ring as kernels address it (mori_shmem_device_state_t::proxy_ring).
  uint64_t ring_address() const { return ring_buffer_.device(); }
  // Returns once every request kernels have posted so far is carried out (host quiet, barrier).
  void drain();

 private:
  struct Taken {
    uint64_t ticket;
    mori_shmem_proxy_entry_t* entry;
  };
  // A put of the batch not yet carried out (from the GPU, or from the entry itself when inline).
  struct PendingPut {
    int pe;
    uint64_t offset;
    const uint8_t* source;
    uint64_t bytes;
    bool inline_bytes;
  };
  // What the proxy did, logged when it stops (at debug level) to tell where its time went.
  struct Tally {
    uint64_t requests = 0, batches = 0, transfers = 0, quiets = 0, bytes = 0;
    double put_s = 0, quiet_s = 0, other_s = 0;
  };

  void run();
  void serve();
  void take_batch(uint64_t first);
  void carry_out_batch();
  void flush_puts();
  void run_put(const PendingPut& put);
  void execute(mori_shmem_proxy_entry_t& entry, uint64_t ticket);
  void publish(uint64_t done, uint64_t head);
  void record_device_error(uint32_t code);

  const cuda::DeviceContext& context_;
  Conduit& conduit_;
  GpuRemoteIo& io_;
  uint8_t* sync_words_;
  int rank_;
  double timeout_s_;
  PinnedBuffer ring_buffer_;
  mori_shmem_proxy_ring_t* ring_;
  cuda::CopyStream completion_;  // writes the GPU copies of head and done
  std::vector<Taken> batch_;
  std::vector<PendingPut> pending_;
  Tally tally_;
  std::atomic<uint64_t> next_{0};  // the next ticket to carry out
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace mori::shmem::remote
