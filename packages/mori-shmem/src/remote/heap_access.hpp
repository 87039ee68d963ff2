// SPDX-License-Identifier: MIT
// What the remote transport's server does to this PE's heap, whatever backs it: host memory (the
// cpu backend: bytes are received into place, atomics are CPU atomics) or GPU memory (the cuda
// backend: remote/gpu_remote_io.hpp stages through pinned memory and runs a one-thread kernel for
// atomics). Offsets have been checked against size() by the caller.
#pragma once

#include <cstdint>

#include "bootstrap/socket.hpp"

namespace mori::shmem::remote {

class HeapAccess {
 public:
  virtual ~HeapAccess() = default;
  virtual uint64_t size() const = 0;
  // Reads `length` bytes from socket into heap[offset, offset + length).
  virtual void receive(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) = 0;
  // Writes heap[offset, offset + length) to socket.
  virtual void send(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) = 0;
  // The 64-bit signal word at offset gets value (SIGNAL_SET) or += value (SIGNAL_ADD), after
  // everything this access wrote before it.
  virtual void signal(uint64_t offset, uint64_t value, int sig_op) = 0;
  // Atomic amo (MORI_SHMEM_AMO_*) on the integer of `type` at offset; returns the old value.
  virtual uint64_t amo(uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) = 0;
  // A put-with-signal's payload, then its signal: receive() and signal(), unless the heap can
  // order the two more cheaply.
  virtual void receive_signalled(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline,
                                 uint64_t signal_offset, uint64_t value, int sig_op) {
    receive(socket, offset, length, deadline);
    signal(signal_offset, value, sig_op);
  }
};

class HostHeapAccess final : public HeapAccess {
 public:
  HostHeapAccess(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  uint64_t size() const override { return size_; }
  void receive(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) override;
  void send(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) override;
  void signal(uint64_t offset, uint64_t value, int sig_op) override;
  uint64_t amo(uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) override;

 private:
  uint8_t* base_;
  uint64_t size_;
};

}  // namespace mori::shmem::remote
