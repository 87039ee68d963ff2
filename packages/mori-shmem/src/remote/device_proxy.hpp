// SPDX-License-Identifier: MIT
// The host half of NOTE [device proxy] (mori_shmem/proxy_ring.h): a thread per PE that carries out
// the requests kernels post for PEs they cannot load/store, over the remote transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "cuda/context.hpp"
#include "mori_shmem/proxy_ring.h"
#include "remote/conduit.hpp"
#include "remote/gpu_remote_io.hpp"

namespace mori::shmem::remote {

class DeviceProxy {
 public:
  // tail_word: the uint64 (GPU memory) kernels take tickets from; error_word: the uint32 (GPU
  // memory) where a failed request leaves its MORI_SHMEM_DEVICE_ERR_* code.
  DeviceProxy(const cuda::DeviceContext& context, Conduit& conduit, GpuRemoteIo& io, uint8_t* tail_word,
              uint8_t* error_word, int rank, double timeout_s);
  ~DeviceProxy();
  DeviceProxy(const DeviceProxy&) = delete;
  DeviceProxy& operator=(const DeviceProxy&) = delete;

  // The ring as kernels address it (mori_shmem_device_state_t::proxy_ring).
  uint64_t ring_address() const { return ring_buffer_.device(); }
  // Returns once every request kernels have posted so far is carried out (host quiet, barrier).
  void drain();

 private:
  void run();
  void execute(mori_shmem_proxy_entry_t& entry, uint64_t ticket);
  void record_device_error(uint32_t code);

  const cuda::DeviceContext& context_;
  Conduit& conduit_;
  GpuRemoteIo& io_;
  uint8_t* tail_word_;
  uint8_t* error_word_;
  int rank_;
  double timeout_s_;
  PinnedBuffer ring_buffer_;
  mori_shmem_proxy_ring_t* ring_;
  std::atomic<uint64_t> next_{0};  // the next ticket to carry out
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace mori::shmem::remote
