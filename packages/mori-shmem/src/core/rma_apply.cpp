// SPDX-License-Identifier: MIT
#include "core/rma_apply.hpp"

#include "core/error.hpp"
#include "mori_shmem/mori_shmem.h"

namespace mori::shmem::rma {

namespace {

template <typename T>
T apply(T* target, int amo, T value, T compare) {
  switch (amo) {
    case MORI_SHMEM_AMO_SET:
    case MORI_SHMEM_SIGNAL_SET: __atomic_store_n(target, value, __ATOMIC_SEQ_CST); return 0;
    case MORI_SHMEM_AMO_ADD:
    case MORI_SHMEM_SIGNAL_ADD:
    case MORI_SHMEM_AMO_FETCH_ADD: return __atomic_fetch_add(target, value, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_INC:
    case MORI_SHMEM_AMO_FETCH_INC: return __atomic_fetch_add(target, T{1}, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_AND:
    case MORI_SHMEM_AMO_FETCH_AND: return __atomic_fetch_and(target, value, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_OR:
    case MORI_SHMEM_AMO_FETCH_OR: return __atomic_fetch_or(target, value, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_XOR:
    case MORI_SHMEM_AMO_FETCH_XOR: return __atomic_fetch_xor(target, value, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_FETCH: return __atomic_load_n(target, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_SWAP: return __atomic_exchange_n(target, value, __ATOMIC_SEQ_CST);
    case MORI_SHMEM_AMO_COMPARE_SWAP:
      __atomic_compare_exchange_n(target, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
      return compare;  // the old value, whether or not the swap happened
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "amo=", amo, " is not an atomic operation code");
}

}  // namespace

size_t type_width(int type) {
  switch (type) {
    case MORI_SHMEM_TYPE_INT32:
    case MORI_SHMEM_TYPE_UINT32: return 4;
    case MORI_SHMEM_TYPE_INT64:
    case MORI_SHMEM_TYPE_UINT64: return 8;
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "type=", type,
              " is not an integer type code (int32=0, uint32=1, int64=2, uint64=3)");
}

void check_amo(int amo) {
  switch (amo) {
    case MORI_SHMEM_AMO_SET:
    case MORI_SHMEM_SIGNAL_SET:
    case MORI_SHMEM_AMO_ADD:
    case MORI_SHMEM_SIGNAL_ADD:
    case MORI_SHMEM_AMO_FETCH_ADD:
    case MORI_SHMEM_AMO_INC:
    case MORI_SHMEM_AMO_FETCH_INC:
    case MORI_SHMEM_AMO_AND:
    case MORI_SHMEM_AMO_FETCH_AND:
    case MORI_SHMEM_AMO_OR:
    case MORI_SHMEM_AMO_FETCH_OR:
    case MORI_SHMEM_AMO_XOR:
    case MORI_SHMEM_AMO_FETCH_XOR:
    case MORI_SHMEM_AMO_FETCH:
    case MORI_SHMEM_AMO_SWAP:
    case MORI_SHMEM_AMO_COMPARE_SWAP: return;
  }
  throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "amo=", amo, " is not an atomic operation code");
}

void check_signal_op(int sig_op) {
  if (sig_op != MORI_SHMEM_SIGNAL_SET && sig_op != MORI_SHMEM_SIGNAL_ADD) {
    throw_error(MORI_SHMEM_ERR_INVALID_ARGUMENT, "sig_op=", sig_op, " must be SIGNAL_SET (9) or SIGNAL_ADD (10)");
  }
}

size_t amo_width(int type) { return type_width(type); }

uint64_t apply_amo(void* target, int amo, int type, uint64_t value, uint64_t compare_value) {
  switch (type) {
    case MORI_SHMEM_TYPE_INT32:
      return widen(apply(static_cast<int32_t*>(target), amo, static_cast<int32_t>(value),
                         static_cast<int32_t>(compare_value)));
    case MORI_SHMEM_TYPE_UINT32:
      return widen(apply(static_cast<uint32_t*>(target), amo, static_cast<uint32_t>(value),
                         static_cast<uint32_t>(compare_value)));
    case MORI_SHMEM_TYPE_INT64:
      return widen(apply(static_cast<int64_t*>(target), amo, static_cast<int64_t>(value),
                         static_cast<int64_t>(compare_value)));
    case MORI_SHMEM_TYPE_UINT64: return apply(static_cast<uint64_t*>(target), amo, value, compare_value);
  }
  type_width(type);  // throws, naming the bad code
  return 0;
}

void apply_signal_word(uint64_t* word, uint64_t signal, int sig_op) {
  check_signal_op(sig_op);
  if (sig_op == MORI_SHMEM_SIGNAL_SET) {
    __atomic_store_n(word, signal, __ATOMIC_RELEASE);
  } else {
    __atomic_fetch_add(word, signal, __ATOMIC_RELEASE);
  }
}

}  // namespace mori::shmem::rma
