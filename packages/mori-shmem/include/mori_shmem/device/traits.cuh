// SPDX-License-Identifier: MIT
// The few type helpers the device API needs. NVRTC ships no <type_traits> or <cstdint>, so they
// are spelled out here; 64-bit words are `unsigned long long` throughout the device API.
#pragma once

namespace mori::shmem::detail {

// Blocks template argument deduction, so ShmemWaitUntil(p, SHMEM_CMP_EQ, 1) takes T from p alone
// and the literal converts to it.
template <typename T>
struct Identity {
  typedef T type;
};
template <typename T>
using NoDeduce = typename Identity<T>::type;

template <int kBytes>
struct UintOfSize;
template <>
struct UintOfSize<1> {
  typedef unsigned char type;
};
template <>
struct UintOfSize<2> {
  typedef unsigned short type;
};
template <>
struct UintOfSize<4> {
  typedef unsigned int type;
};
template <>
struct UintOfSize<8> {
  typedef unsigned long long type;
};
template <typename T>
using BitsOf = typename UintOfSize<sizeof(T)>::type;

// Integers that atomics and waits accept: every 4- and 8-byte integer spelling, so that
// uint64_t from <cstdint> (unsigned long on LP64) works as well as unsigned long long.
template <typename T>
struct IsWordInt {
  static constexpr bool value = false;
};
#define MORI_SHMEM_WORD_INT_(T)             \
  template <>                               \
  struct IsWordInt<T> {                     \
    static constexpr bool value = true;     \
  };
MORI_SHMEM_WORD_INT_(int)
MORI_SHMEM_WORD_INT_(unsigned int)
MORI_SHMEM_WORD_INT_(long)
MORI_SHMEM_WORD_INT_(unsigned long)
MORI_SHMEM_WORD_INT_(long long)
MORI_SHMEM_WORD_INT_(unsigned long long)
#undef MORI_SHMEM_WORD_INT_

template <typename To, typename From>
__device__ __forceinline__ To BitCast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs equal sizes");
  return __builtin_bit_cast(To, from);  // nvcc and NVRTC both have it; NVRTC has no __builtin_memcpy
}

}  // namespace mori::shmem::detail

// The 4- and 8-byte integer types of MORI's named atomic and wait families, as (Name, type).
#define MORI_SHMEM_FOR_EACH_WORD_TYPE(X) \
  X(Uint32, unsigned int)                \
  X(Int32, int)                          \
  X(Uint64, unsigned long long)          \
  X(Int64, long long)                    \
  X(Ulong, unsigned long)                \
  X(Long, long)
