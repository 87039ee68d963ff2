// SPDX-License-Identifier: MIT
// The remote transport on the cuda backend, where the heap is GPU memory that sockets cannot read
// or write: bytes are staged through pinned host memory. Each transfer takes a staging lane (two
// halves, each with its own stream) for its duration, so the copy of one chunk overlaps the socket
// transfer of the next, and concurrent transfers (a PE's streams serving peers, its own outbound
// puts) never queue behind one buffer. Signal sets arriving for the heap are stream writes; other
// atomics run as a one-thread kernel, PTX written here and JIT-compiled by the driver, so the
// library still needs no CUDA compiler or headers at build time.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/context.hpp"
#include "remote/conduit.hpp"
#include "remote/heap_access.hpp"

namespace mori::shmem::remote {

// Pinned, device-mapped host memory (cuMemHostAlloc PORTABLE | DEVICEMAP).
class PinnedBuffer {
 public:
  PinnedBuffer(const cuda::DeviceContext& context, size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  uint8_t* host() const { return host_; }
  uint64_t device() const { return device_; }  // the same memory as the GPU addresses it
  size_t size() const { return size_; }

 private:
  uint8_t* host_ = nullptr;
  uint64_t device_ = 0;
  size_t size_;
};

// Pinned memory in two halves with a stream each: a transfer fills one half while the other's
// copy runs.
struct StagingLane {
  StagingLane(const cuda::DeviceContext& context, size_t half_bytes);
  uint8_t* half(int i) const { return buffer.host() + size_t(i) * half_bytes; }
  size_t half_bytes;
  PinnedBuffer buffer;
  cuda::CopyStream streams[2];
};

// Lanes made on first need, up to a bound, and lent one per transfer.
class StagingLanes {
 public:
  StagingLanes(const cuda::DeviceContext& context, size_t half_bytes, size_t max_lanes, size_t initial_lanes);
  class Lease {
   public:
    Lease(StagingLanes& owner, StagingLane* lane) : owner_(owner), lane_(lane) {}
    ~Lease() { owner_.give_back(lane_); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    StagingLane* operator->() const { return lane_; }
    StagingLane& operator*() const { return *lane_; }

   private:
    StagingLanes& owner_;
    StagingLane* lane_;
  };
  Lease take();

 private:
  void give_back(StagingLane* lane);
  const cuda::DeviceContext& context_;
  size_t half_bytes_;
  size_t max_lanes_;
  std::mutex mutex_;
  std::condition_variable freed_;
  std::vector<std::unique_ptr<StagingLane>> all_;
  std::vector<StagingLane*> idle_;
};

class GpuRemoteIo final : public HeapAccess {
 public:
  GpuRemoteIo(const cuda::DeviceContext& context, uint8_t* heap_base, uint64_t heap_size);
  ~GpuRemoteIo() override;
  GpuRemoteIo(const GpuRemoteIo&) = delete;
  GpuRemoteIo& operator=(const GpuRemoteIo&) = delete;

  // HeapAccess: requests arriving for this PE's GPU heap.
  uint64_t size() const override { return heap_size_; }
  void receive(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) override;
  void send(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) override;
  void signal(uint64_t offset, uint64_t value, int sig_op) override;
  void receive_then_signal(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline,
                           uint64_t signal_offset, uint64_t value, int sig_op) override;
  uint64_t amo(uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) override;

  // Outbound: `local` is any memory the driver can copy (device or host).
  void put(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes);
  void get(Conduit& conduit, int pe, uint64_t offset, void* local, size_t nbytes);
  void put_signal(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes,
                  uint64_t signal_offset, uint64_t signal, int sig_op);

 private:
  // Receives into heap[offset, +length) through `lane`; returns with the last chunk's copy queued
  // on lane stream `*last` and every earlier one complete.
  void receive_staged(StagingLane& lane, Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline,
                      int* last);
  // Sends local[0, nbytes) with send_chunk(staged bytes, chunk offset, chunk length) per chunk,
  // copying the next chunk while the current one is sent.
  template <typename SendChunk>
  void send_staged(const uint8_t* local, size_t nbytes, SendChunk&& send_chunk);

  const cuda::DeviceContext& context_;
  uint8_t* heap_;
  uint64_t heap_size_;
  StagingLanes lanes_;
  std::mutex amo_mutex_;
  PinnedBuffer answer_;  // where the atomic kernel writes the old value
  cuda::CUmodule module_ = nullptr;
  cuda::CUfunction amo32_ = nullptr;
  cuda::CUfunction amo64_ = nullptr;
};

}  // namespace mori::shmem::remote
