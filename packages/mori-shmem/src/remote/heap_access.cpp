// SPDX-License-Identifier: MIT
#include "remote/heap_access.hpp"

#include "core/rma_apply.hpp"

namespace mori::shmem::remote {

void HostHeapAccess::receive(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) {
  socket.recv_all(base_ + offset, length, deadline, "a put's payload");
}

void HostHeapAccess::send(Socket& socket, uint64_t offset, uint64_t length, const Deadline& deadline) {
  socket.send_all(base_ + offset, length, deadline, "a get's data");
}

void HostHeapAccess::signal(uint64_t offset, uint64_t value, int sig_op) {
  rma::apply_signal_word(reinterpret_cast<uint64_t*>(base_ + offset), value, sig_op);
}

uint64_t HostHeapAccess::amo(uint64_t offset, int amo, int type, uint64_t value, uint64_t compare) {
  return rma::apply_amo(base_ + offset, amo, type, value, compare);
}

}  // namespace mori::shmem::remote
