// SPDX-License-Identifier: MIT
// mori-shmem's own kernels, compiled by its JIT at run time (NVRTC or nvcc) and loaded once per
// device. The host fills this module's `mori_shmem_device_state` global after loading it.
#include "mori_shmem/mori_shmem_device.cuh"

namespace {

namespace ms = mori::shmem;

template <typename T>
__device__ __forceinline__ void HostAtomic(const mori_shmem_device_state_t& st, void* dest, int amo,
                                           unsigned long long value, unsigned long long compare, int pe,
                                           unsigned long long* fetched) {
  typedef ms::detail::BitsOf<T> U;
  // value / compare carry the operand in their low sizeof(T) bytes (sign-extended by the host for
  // signed types); the truncation keeps exactly those bits.
  const T v = ms::detail::BitCast<T>(static_cast<U>(value));
  const T c = ms::detail::BitCast<T>(static_cast<U>(compare));
  unsigned long long old = 0;
  if (ms::detail::IsFetchAmo(amo)) {
    old = ms::detail::BitCast<U>(ms::ShmemAtomicTypeFetchThread<T>(st, static_cast<T*>(dest), v, c, amo, pe));
  } else {
    ms::ShmemAtomicTypeNonFetchThread<T>(st, static_cast<T*>(dest), v, amo, pe);  // records bad codes
  }
  if (fetched != nullptr) *fetched = old;
}

}  // namespace

// Device barrier of all PEs, using the module global state: quiet, then the epoch barrier of
// device/sync.cuh run by thread 0, the block synchronised around it. shmem_barrier_on_stream
// launches it as <<<1, 1>>> on the caller's stream, so it orders the stream's earlier kernels'
// writes before every PE's later ones. Any block shape works; launch exactly one block per PE.
extern "C" __global__ void mori_shmem_barrier_all_block() { ms::ShmemBarrierAllBlock(); }

// One atomic on the GPU heap for the host API (mori_shmem_atomic). Launch <<<1, 1>>>.
//   st       the device state, by value
//   dest     symmetric address of the integer (this PE's heap)
//   amo      mori_shmem_amo_t code: non-fetching (INC, SET, ADD, AND, OR, XOR, SIGNAL_SET,
//            SIGNAL_ADD) or fetching (FETCH, FETCH_INC, FETCH_ADD, FETCH_AND, FETCH_OR,
//            FETCH_XOR, SWAP, COMPARE_SWAP)
//   type     mori_shmem_int_type_t: 0 int32, 1 uint32, 2 int64, 3 uint64
//   value, compare  operand bits in the low 4 / 8 bytes
//   pe       target PE
//   fetched  may be NULL; otherwise receives the old value's bit pattern zero-extended to 64 bits
//            for a fetching op, 0 for a non-fetching one or when the op failed
// Errors go to the error word: an unknown amo or type ERR_INVALID_ARGUMENT, plus those of the
// atomic itself (ERR_UNREACHABLE_PE, ERR_BAD_ADDRESS).
extern "C" __global__ void mori_shmem_host_atomic(mori_shmem_device_state_t st, void* dest, int amo, int type,
                                                  unsigned long long value, unsigned long long compare, int pe,
                                                  unsigned long long* fetched) {
  if (threadIdx.x != 0 || threadIdx.y != 0 || threadIdx.z != 0 || blockIdx.x != 0 || blockIdx.y != 0 ||
      blockIdx.z != 0) {
    return;
  }
  switch (type) {
    case ms::SHMEM_TYPE_INT32:
      HostAtomic<int>(st, dest, amo, value, compare, pe, fetched);
      break;
    case ms::SHMEM_TYPE_UINT32:
      HostAtomic<unsigned int>(st, dest, amo, value, compare, pe, fetched);
      break;
    case ms::SHMEM_TYPE_INT64:
      HostAtomic<long long>(st, dest, amo, value, compare, pe, fetched);
      break;
    case ms::SHMEM_TYPE_UINT64:
      HostAtomic<unsigned long long>(st, dest, amo, value, compare, pe, fetched);
      break;
    default:
      ms::detail::SetError(st, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
      if (fetched != nullptr) *fetched = 0;
      break;
  }
}
