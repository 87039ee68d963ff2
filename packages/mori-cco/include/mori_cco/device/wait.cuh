// SPDX-License-Identifier: MIT
// The bounded spin every device-side wait uses, and the error word it reports to.
//
// A dead or stuck peer must end the kernel, not hang it (and the process, and a CUDA graph):
// after comm.spin_timeout_ns (0 = forever) the wait stores its code into this rank's error word
// and returns false; the host reads the word after the kernel. A wait also gives up as soon as
// the word holds any error, so one lost peer costs one timeout per kernel, not one per wait.
#pragma once

#include <mori_shmem/device/ptx.cuh>

#include "../dev_comm.h"
#include "lsa.cuh"

namespace mori::cco::device {

// The first error wins: later ones are usually consequences of it.
__device__ __forceinline__ void record_error(const mori_cco_dev_comm_t& comm, unsigned code) {
  atomicCAS_system(error_word(comm), 0ull, static_cast<word_t>(code));
}

__device__ __forceinline__ bool has_error(const mori_cco_dev_comm_t& comm) {
  return *reinterpret_cast<volatile word_t*>(error_word(comm)) != MORI_CCO_ERR_NONE;
}

// Spins with system-scope acquire loads until *word >= least (words are monotonic, never reset).
// True once it is; false (with `code` recorded) when the bound expires or an error is pending.
// The acquire makes the writes the peer published before raising the word visible to this thread.
__device__ __forceinline__ bool wait_at_least(const mori_cco_dev_comm_t& comm, const word_t* word, word_t least,
                                           unsigned code) {
  using mori::shmem::detail::GlobalTimerNs;
  using mori::shmem::detail::LdAcquireSys;
  if (LdAcquireSys(word) >= least) return true;
  const unsigned long long start = GlobalTimerNs();
  for (unsigned spin = 1;; ++spin) {
    if (LdAcquireSys(word) >= least) return true;
    if (spin % 64 == 0) {
      const unsigned long long waited = GlobalTimerNs() - start;
      if (comm.spin_timeout_ns != 0 && waited >= comm.spin_timeout_ns) {
        record_error(comm, code);
        return false;
      }
      if (has_error(comm)) return false;
      if (waited > 100000) __nanosleep(256);  // no longer latency-bound: leave issue slots to others
    }
  }
}

}  // namespace mori::cco::device
