// SPDX-License-Identifier: MIT
// The host half of NOTE [device proxy] (mori_shmem/proxy_ring.h): a thread per PE that carries out
// the requests kernels post for PEs they cannot load/store, over the remote transport.
//
// NOTE [done once staged]
// A kernel's put (and staged put-with-signal) waits for `done` to pass its ticket only so that its
// source may be reused; a QUIET is what waits for the target. So `done` passes a put as soon as
// its bytes are in the staging slots, before they go on the wire, and the kernel's next request
// (typically its QUIET) is posted while the proxy is still sending. Moving `done` only at a
// batch's end cost a wait of the proxy for the GPU between every two batches: the stream write
// that moves the GPU's copy of `done`, the kernel's look at it and its next post (issue 32: about
// four such waits of some 30 us per launch of the benchmark's puts with a quiet per block; with
// this, 4 and 16 MiB moved up 14-18 % and 1 MiB did not, docs/benchmarks/shmem.md). `done` still
// moves in ticket order: within a batch, only up to its first QUIET before the quiet is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "cuda/context.hpp"
#include "cuda/vmm_block.hpp"
#include "mori_shmem/proxy_ring.h"
#include "remote/conduit.hpp"
#include "remote/gpu_remote_io.hpp"
#include "remote/time_account.hpp"

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
  void run();
  void execute(mori_shmem_proxy_entry_t& entry, uint64_t ticket);
  // Whether a request of op joins a batch (NOTE [coalesced puts] in put_batch.hpp).
  static bool batchable(unsigned op);
  // Carries out the batch of requests that starts at the ready ticket `first` and returns the
  // ticket after it.
  uint64_t execute_batch(uint64_t first);
  // A merged transfer's bound: the staging copies and sends of one stay within a few chunks.
  static constexpr uint64_t kMaxTransferBytes = 64ull << 20;
  void record_device_error(uint32_t code);
  // Sets a word kernels poll: in the ring (pinned host memory) and in its copy in GPU memory.
  void publish(size_t word_offset, uint64_t value);

  const cuda::DeviceContext& context_;
  Conduit& conduit_;
  GpuRemoteIo& io_;
  uint8_t* sync_words_;
  int rank_;
  double timeout_s_;
  PinnedBuffer ring_buffer_;
  mori_shmem_proxy_ring_t* ring_;
  // mori_shmem_proxy_words_t (proxy_ring.h); cuMemCreate'd, so that the work context sets them
  // while the application's thread holds the primary context (DeviceContext::WorkScope).
  cuda::VmmBlock device_words_block_;
  cuda::CUdeviceptr device_words_;
  std::atomic<uint64_t> next_{0};  // the next ticket to carry out
  // Per request op (proxy_ring.h's codes, 0 unused; a batch of puts and QUIETs under its first
  // request's), the waits between requests (the time from one request's completion to the next
  // one's arrival, while kernels were posting), and a batch's two parts.
  enum : size_t { kWaitPhase = 10, kBatchTransfers, kBatchQuiet };
  TimeAccount<13> times_{{"-", "put", "get", "put_signal", "signal", "amo", "amo_fetch", "put_imm", "quiet",
                          "put_signal_inline", "wait for the next request", "a batch's transfers", "a batch's quiet"}};
  // Requests and merged transfers over all batches (proxy thread only; logged with times_).
  uint64_t batched_requests_ = 0;
  uint64_t batch_transfers_ = 0;
  // Set by publish(), which a staged put may call from a conduit thread (NOTE [streamed staging]).
  std::atomic<bool> publish_failed_{false};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace mori::shmem::remote
