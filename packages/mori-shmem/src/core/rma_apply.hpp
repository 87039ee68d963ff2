// SPDX-License-Identifier: MIT
// The codes of one-sided atomics and signals, and their effect on a word of host memory: what the
// host-initiated path applies to a mapped peer and what a conduit's server applies to its own heap
// (one definition, so that both agree; and small, so that a test can build a conduit without the
// rest of the library).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace mori::shmem::rma {

size_t type_width(int type);       // 4 or 8; INVALID_ARGUMENT for an unknown type code
size_t amo_width(int type);        // the same, for a conduit's atomic
void check_amo(int amo);           // INVALID_ARGUMENT unless amo is an atomic operation code
void check_signal_op(int sig_op);  // INVALID_ARGUMENT unless SIGNAL_SET or SIGNAL_ADD
uint64_t apply_amo(void* target, int amo, int type, uint64_t value, uint64_t compare);
void apply_signal_word(uint64_t* word, uint64_t signal, int sig_op);  // release

// Old values travel back as 64-bit patterns; signed 32-bit ones are sign-extended.
template <typename T>
uint64_t widen(T value) {
  return static_cast<uint64_t>(static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(value));
}

}  // namespace mori::shmem::rma
