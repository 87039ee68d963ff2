// SPDX-License-Identifier: MIT
// The remote transport on the cuda backend, where the heap is GPU memory that sockets cannot read
// or write: bytes are staged through pinned host memory (NOTE [staging pipeline]: slots for what
// leaves, and a set of slots for each connection being served, so a PE serving a peer never waits
// for its own outbound transfer). Signal sets arriving
// for the heap are stream writes; other atomics run as a one-thread kernel, PTX written here and
// JIT-compiled by the driver, so the library still needs no CUDA compiler or headers at build time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

#include "cuda/context.hpp"
#include "remote/conduit.hpp"
#include "remote/heap_access.hpp"
#include "remote/pinned_buffer.hpp"
#include "remote/staging_slots.hpp"
#include "remote/time_account.hpp"

namespace mori::shmem::remote {

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
  uint64_t amo(uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) override;
  void receive_signalled(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline,
                         uint64_t signal_offset, uint64_t value, int sig_op) override;

  // Outbound: `local` is any memory the driver can copy (device or host). on_staged, when given,
  // runs once every byte has left `local`, mostly before the last of them go on the wire, and
  // possibly on one of the conduit's threads (NOTE [streamed staging]).
  void put(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes,
           const std::function<void()>& on_staged = {});
  void get(Conduit& conduit, int pe, uint64_t offset, void* local, size_t nbytes);
  void put_signal(Conduit& conduit, int pe, uint64_t offset, const void* local, size_t nbytes,
                  uint64_t signal_offset, uint64_t signal, int sig_op, const std::function<void()>& on_staged = {});

 private:
  const cuda::DeviceContext& context_;
  uint8_t* heap_;
  uint64_t heap_size_;
  StagingPool inbound_;  // for the requests peers send: their puts' payloads and gets' answers
  std::mutex outbound_mutex_;
  StagingSlots outbound_;
  std::mutex word_mutex_;  // the PE's stream's words and atomics, and answer_
  PinnedBuffer answer_;    // where the atomic kernel writes the old value
  // Waits for staging copies, and socket or conduit time, of this PE's own transfers and of the
  // requests it serves, logged at finalize (time_account.hpp).
  enum Phase : size_t { kOutCopy, kOutWire, kInWire, kInCopy };
  TimeAccount<4> times_{{"own transfers' staging copies", "own transfers' conduit time", "served requests' socket time",
                         "served requests' staging copies"}};
  cuda::CUmodule module_ = nullptr;
  cuda::CUfunction amo32_ = nullptr;
  cuda::CUfunction amo64_ = nullptr;
};

}  // namespace mori::shmem::remote
