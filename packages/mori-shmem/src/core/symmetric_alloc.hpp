// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/state.hpp"

namespace mori::shmem {

// COLLECTIVE (unless MORI_SHMEM_CHECK_SYMMETRY=0). Every PE allocates locally, then the PEs
// compare outcomes: if any PE failed, all roll back and raise that PE's error; if the offsets
// differ, all roll back and raise MORI_SHMEM_ERR_SYMMETRY. A PE never returns a pointer that is
// not valid on every peer.
void* symmetric_malloc(PeState& state, size_t size, size_t alignment, const char* caller);
void symmetric_free(PeState& state, void* ptr);

// Heap offset of [ptr, ptr + nbytes) in this PE's mapping; throws MORI_SHMEM_ERR_INVALID_POINTER
// naming `argument` when the range is not inside the heap.
uint64_t heap_offset(const PeState& state, const void* ptr, size_t nbytes, const char* argument);

// Throws MORI_SHMEM_ERR_PE_OUT_OF_RANGE naming `argument`.
void check_pe(const PeState& state, int pe, const char* argument);

}  // namespace mori::shmem
