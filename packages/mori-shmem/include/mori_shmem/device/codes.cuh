// SPDX-License-Identifier: MIT
// Numeric codes of the device API.
//
// The atomic, comparison and integer-type codes mirror mori_shmem.h's mori_shmem_amo_t,
// mori_shmem_cmp_t and mori_shmem_int_type_t value for value (and MORI's core::atomicType), so a
// code the host or an IR frontend passes as a raw int means the same thing here. mori_shmem.h is
// not included because it pulls in <stdint.h> and the generated version.h, neither of which NVRTC
// has; if you change a value there, change it here.
#pragma once

#include "../device_state.h"

namespace mori::core {

// MORI's name for the atomic codes (core::atomicType), so MORI kernels that write
// core::AMO_ADD or core::atomicType::AMO_SIGNAL_SET compile unchanged.
enum atomicType : int {
  AMO_ACK = 1,  // reserved (RDMA acknowledgements in MORI); not accepted by the device API
  AMO_INC = 2,
  AMO_SET = 3,
  AMO_ADD = 4,
  AMO_AND = 5,
  AMO_OR = 6,
  AMO_XOR = 7,
  AMO_SIGNAL = 8,  // reserved; not accepted by the device API
  SIGNAL_SET = 9,
  SIGNAL_ADD = 10,
  AMO_SIGNAL_SET = 9,
  AMO_SIGNAL_ADD = 10,
  AMO_END_OF_NONFETCH = 11,
  AMO_FETCH = 12,
  AMO_FETCH_INC = 13,
  AMO_FETCH_ADD = 14,
  AMO_FETCH_AND = 15,
  AMO_FETCH_OR = 16,
  AMO_FETCH_XOR = 17,
  AMO_SWAP = 18,
  AMO_COMPARE_SWAP = 19,
};

}  // namespace mori::core

namespace mori::shmem {

// The codes are also reachable as mori::shmem::AMO_ADD etc.
using core::atomicType;
using core::AMO_INC;
using core::AMO_SET;
using core::AMO_ADD;
using core::AMO_AND;
using core::AMO_OR;
using core::AMO_XOR;
using core::SIGNAL_SET;
using core::SIGNAL_ADD;
using core::AMO_SIGNAL_SET;
using core::AMO_SIGNAL_ADD;
using core::AMO_FETCH;
using core::AMO_FETCH_INC;
using core::AMO_FETCH_ADD;
using core::AMO_FETCH_AND;
using core::AMO_FETCH_OR;
using core::AMO_FETCH_XOR;
using core::AMO_SWAP;
using core::AMO_COMPARE_SWAP;

// Comparison operators of ShmemWaitUntil / ShmemTest (NVSHMEM's numbering, as mori_shmem_cmp_t).
enum ShmemCmpType : int {
  SHMEM_CMP_EQ = 0,
  SHMEM_CMP_NE = 1,
  SHMEM_CMP_GT = 2,
  SHMEM_CMP_LE = 3,
  SHMEM_CMP_LT = 4,
  SHMEM_CMP_GE = 5,
};

// Integer element types, as mori_shmem_int_type_t (used by the host-atomic kernel).
enum ShmemIntType : int {
  SHMEM_TYPE_INT32 = 0,
  SHMEM_TYPE_UINT32 = 1,
  SHMEM_TYPE_INT64 = 2,
  SHMEM_TYPE_UINT64 = 3,
};

}  // namespace mori::shmem
