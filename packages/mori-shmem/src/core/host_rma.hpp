// SPDX-License-Identifier: MIT
// Host-initiated one-sided operations. A peer whose heap is mapped in this process (same host,
// P2P) is reached with memcpy and CPU atomics on the shared pages (a driver copy on the cuda
// backend); any other peer through the remote transport (remote/conduit.hpp). Ordering
// follows OpenSHMEM: a signal is released after its data, waits acquire, quiet completes puts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/state.hpp"

namespace mori::shmem::rma {

void put(PeState& state, void* dest, const void* src, size_t nbytes, int pe);
void get(PeState& state, void* dest, const void* src, size_t nbytes, int pe);
void put_signal(PeState& state, void* dest, const void* src, size_t nbytes, uint64_t* sig_addr, uint64_t signal,
                int sig_op, int pe);
void signal_op(PeState& state, uint64_t* sig_addr, uint64_t signal, int sig_op, int pe);
uint64_t atomic(PeState& state, void* dest, int amo, int type, uint64_t value, uint64_t compare, int pe);
uint64_t wait_until(PeState& state, const void* ivar, int type, int cmp, uint64_t value, int64_t timeout_ms);
bool test(PeState& state, const void* ivar, int type, int cmp, uint64_t value);
// Completes this PE's outstanding remote puts (see NOTE [remote transport]); a memory fence for
// load/store peers.
void quiet(PeState& state);

}  // namespace mori::shmem::rma
