// SPDX-License-Identifier: MIT
// The cpu backend's side of the dev comm's synchronisation words (dev_comm.h): the same LSA
// barrier protocol the device headers run, with host atomics on the shared slots. Waits poll,
// then yield, then sleep, so that more PEs than cores still make progress, and give up with
// ccoTimeout after spin_timeout_ns.
#pragma once

#include <cstdint>

#include "mori_cco/dev_comm.h"

namespace mori::cco::host {

inline uint64_t* resource_word(const mori_cco_dev_comm_t& comm, int lsa_rank, uint64_t offset) {
  return reinterpret_cast<uint64_t*>(comm.flat_base + static_cast<uint64_t>(lsa_rank) * comm.per_rank_size +
                                     comm.resource.offset + offset);
}

// Arrives at LSA barrier `index` and waits for every LSA peer; throws ccoTimeout naming the
// peers that did not arrive.
void lsa_barrier(const mori_cco_dev_comm_t& comm, uint32_t index);

// Waits until the word at `word` (in this rank's memory) is >= least.
void wait_at_least(const uint64_t* word, uint64_t least, uint64_t timeout_ns, const char* what);

}  // namespace mori::cco::host
