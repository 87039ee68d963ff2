// SPDX-License-Identifier: MIT
// Host-initiated one-sided operations on the CPU backend: a peer's heap is mapped in this process,
// so data moves with memcpy and atomics are CPU atomics on the shared pages. Ordering follows
// OpenSHMEM: a signal is released after its data, waits acquire.
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
void quiet();

}  // namespace mori::shmem::rma
