// SPDX-License-Identifier: MIT
#include "host/lsa_sync.hpp"

#include <sched.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace mori::cco::host {

namespace {

// Polls `ready` with backoff until it returns true or the deadline passes.
template <typename Ready>
bool poll_until(Ready&& ready, uint64_t timeout_ns) {
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t spin = 0;; ++spin) {
    if (ready()) return true;
    if (spin < 1024) continue;
    if (timeout_ns != 0 && std::chrono::steady_clock::now() - start > std::chrono::nanoseconds(timeout_ns)) {
      return ready();
    }
    if (spin < 4096) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace

void wait_at_least(const uint64_t* word, uint64_t least, uint64_t timeout_ns, const char* what) {
  if (!poll_until([&] { return __atomic_load_n(word, __ATOMIC_ACQUIRE) >= least; }, timeout_ns)) {
    fail(ccoTimeout, what, ": waited ", timeout_ns / 1e9, " s for ", least, ", the word holds ",
         __atomic_load_n(word, __ATOMIC_ACQUIRE));
  }
}

void lsa_barrier(const mori_cco_dev_comm_t& comm, uint32_t index) {
  if (index >= comm.lsa_barrier_count) {
    fail(ccoInvalidArgument, "barrier index ", index, " is outside the dev comm's lsa_barrier_count ",
         comm.lsa_barrier_count);
  }
  uint64_t* epoch = resource_word(comm, comm.lsa_rank, comm.barrier_epoch_offset + 8ull * index);
  const uint64_t next = *epoch + 1;
  const uint64_t inbox_row = comm.barrier_inbox_offset + 8ull * index * static_cast<uint64_t>(comm.lsa_size);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  for (int peer = 0; peer < comm.lsa_size; ++peer) {
    __atomic_store_n(resource_word(comm, peer, inbox_row + 8ull * comm.lsa_rank), next, __ATOMIC_RELEASE);
  }
  const uint64_t* inbox = resource_word(comm, comm.lsa_rank, inbox_row);
  const bool all = poll_until(
      [&] {
        for (int peer = 0; peer < comm.lsa_size; ++peer) {
          if (__atomic_load_n(&inbox[peer], __ATOMIC_ACQUIRE) < next) return false;
        }
        return true;
      },
      comm.spin_timeout_ns);
  if (!all) {
    std::string missing;
    for (int peer = 0; peer < comm.lsa_size; ++peer) {
      if (__atomic_load_n(&inbox[peer], __ATOMIC_ACQUIRE) < next) missing += " " + std::to_string(peer);
    }
    fail(ccoTimeout, "LSA barrier ", index, ": LSA ranks", missing, " did not arrive within ",
         comm.spin_timeout_ns / 1e9, " s");
  }
  *epoch = next;
}

}  // namespace mori::cco::host
