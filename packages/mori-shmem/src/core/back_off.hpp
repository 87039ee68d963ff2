// SPDX-License-Identifier: MIT
// How a host thread waits for what another thread or PE will do: spin while it is imminent, then
// yield, then nap, so that a long wait leaves the CPU to whoever must act (a machine may have
// fewer cores than PEs and progress threads). Each caller picks the thresholds its latency needs.
#pragma once

#include <sched.h>
#include <time.h>

#include <cstdint>

namespace mori::shmem {

// Round `round` (0, 1, ...) of a wait: returns at once below `spin_rounds`, yields the CPU below
// `yield_rounds`, else naps 20 us.
inline void back_off(uint64_t round, uint64_t spin_rounds, uint64_t yield_rounds) {
  if (round < spin_rounds) return;
  if (round < yield_rounds) {
    sched_yield();
    return;
  }
  timespec nap{0, 20000};
  nanosleep(&nap, nullptr);
}

}  // namespace mori::shmem
