// SPDX-License-Identifier: MIT
// The device library of mori-ir: mori-shmem's device API as extern "C" functions with flat
// argument types, compiled to NVPTX LLVM bitcode (libmori_shmem_device.bc) that Triton and other
// LLVM-based compilers link into their kernels.
//
// Every function uses the module-global form of the device API: the state comes from
// `mori_shmem_device_state`, which this file defines and mori.shmem.shmem_module_init fills after
// the consumer's module is loaded. Addresses are 64-bit integers; functions with no result return
// 0 so that frontends that need a value (Triton's extern_elementwise) can call them.
// python/mori/ir/functions.py is the table of these signatures; a test compares the two.
#include "mori_shmem/mori_shmem_device.cuh"

using namespace mori::shmem;

#define MORI_IR_API extern "C" __device__
#define MORI_IR_PTR(x) reinterpret_cast<void*>(x)
#define MORI_IR_TPTR(T, x) reinterpret_cast<T*>(x)

// ---- query and address -----------------------------------------------------------------------

MORI_IR_API int mori_shmem_my_pe() { return ShmemMyPe(); }
MORI_IR_API int mori_shmem_n_pes() { return ShmemNPes(); }
MORI_IR_API unsigned long long mori_shmem_ptr_p2p(unsigned long long ptr, int myPe, int destPe) {
  return reinterpret_cast<unsigned long long>(ShmemPtrP2p(MORI_IR_PTR(ptr), myPe, destPe));
}
MORI_IR_API unsigned long long mori_shmem_ptr(unsigned long long dest, int pe) {
  return reinterpret_cast<unsigned long long>(ShmemPtrP2p(MORI_IR_PTR(dest), pe));
}

// ---- ordering and barriers ---------------------------------------------------------------------

MORI_IR_API int mori_shmem_quiet_thread() { ShmemQuietThread(); return 0; }
MORI_IR_API int mori_shmem_quiet_thread_pe(int pe) { ShmemQuietThread(pe); return 0; }
MORI_IR_API int mori_shmem_quiet_thread_pe_qp(int pe, int qp) { ShmemQuietThread(pe, qp); return 0; }
MORI_IR_API int mori_shmem_fence_thread() { ShmemFenceThread(); return 0; }
MORI_IR_API int mori_shmem_fence_thread_pe(int pe) { ShmemFenceThread(pe); return 0; }
MORI_IR_API int mori_shmem_fence_thread_pe_qp(int pe, int qp) { ShmemFenceThread(pe, qp); return 0; }
MORI_IR_API int mori_shmem_barrier_all_thread() { ShmemBarrierAllThread(); return 0; }
MORI_IR_API int mori_shmem_barrier_all_block() { ShmemBarrierAllBlock(); return 0; }

// ---- put / get -------------------------------------------------------------------------------------
// mem: (dest, src, nbytes, pe, qp); typed: (dest, src, nelems, pe, qp).

#define MORI_IR_MEM_(name, Call)                                                                          \
  MORI_IR_API int mori_shmem_##name(unsigned long long dest, unsigned long long src, unsigned long long n, \
                                    int pe, int qp) {                                                     \
    Call(MORI_IR_PTR(dest), reinterpret_cast<const void*>(src), n, pe, qp);                               \
    return 0;                                                                                             \
  }
#define MORI_IR_TYPED_(name, Call, T)                                                                     \
  MORI_IR_API int mori_shmem_##name(unsigned long long dest, unsigned long long src, unsigned long long n, \
                                    int pe, int qp) {                                                     \
    Call<T>(MORI_IR_TPTR(T, dest), reinterpret_cast<const T*>(src), n, pe, qp);                           \
    return 0;                                                                                             \
  }
// The four typed forms of one family: prefix_<type>suffix.
#define MORI_IR_TYPED4_(prefix, suffix, TypedCall)                          \
  MORI_IR_TYPED_(prefix##_uint32##suffix, TypedCall, unsigned int)          \
  MORI_IR_TYPED_(prefix##_uint64##suffix, TypedCall, unsigned long long)    \
  MORI_IR_TYPED_(prefix##_float##suffix, TypedCall, float)                  \
  MORI_IR_TYPED_(prefix##_double##suffix, TypedCall, double)

#define MORI_IR_SCOPE_(Scope, scope)                                                     \
  MORI_IR_MEM_(putmem_nbi_##scope, ShmemPutMemNbi##Scope)                               \
  MORI_IR_TYPED4_(put, _nbi_##scope, ShmemPutTypeNbi##Scope)                            \
  MORI_IR_MEM_(getmem_nbi_##scope, ShmemGetMemNbi##Scope)                               \
  MORI_IR_TYPED4_(get, _nbi_##scope, ShmemGetTypeNbi##Scope)                            \
  MORI_IR_MEM_(getmem_##scope, ShmemGetMem##Scope)                                      \
  MORI_IR_TYPED4_(get, _##scope, ShmemGetType##Scope)                                   \
  MORI_IR_MEM_(putmem_##scope, ShmemPutMem##Scope)                                      \
  MORI_IR_API int mori_shmem_putmem_nbi_signal_##scope(                                 \
      unsigned long long dest, unsigned long long src, unsigned long long nbytes,       \
      unsigned long long sigAddr, unsigned long long sigVal, int sigOp, int pe, int qp) { \
    ShmemPutMemNbiSignal##Scope(MORI_IR_PTR(dest), reinterpret_cast<const void*>(src),  \
                                nbytes, MORI_IR_TPTR(unsigned long long, sigAddr), sigVal, \
                                sigOp, pe, qp);                                          \
    return 0;                                                                            \
  }

MORI_IR_SCOPE_(Thread, thread)
MORI_IR_SCOPE_(Warp, warp)
MORI_IR_SCOPE_(Block, block)

// ---- immediate put of a scalar ---------------------------------------------------------------------

MORI_IR_API int mori_shmem_put_size_imm_nbi_thread(unsigned long long dest, unsigned long long valPtr,
                                                   unsigned long long bytes, int pe, int qp) {
  ShmemPutSizeImmNbiThread(MORI_IR_PTR(dest), reinterpret_cast<const void*>(valPtr), bytes, pe, qp);
  return 0;
}

#define MORI_IR_IMM_(name, T)                                                                \
  MORI_IR_API int mori_shmem_##name##_p(unsigned long long dest, T val, int pe, int qp) {    \
    ShmemPutTypeImmNbiThread<T>(MORI_IR_TPTR(T, dest), val, pe, qp);                         \
    return 0;                                                                                \
  }
MORI_IR_IMM_(int32, int)
MORI_IR_IMM_(int64, long long)
MORI_IR_IMM_(uint32, unsigned int)
MORI_IR_IMM_(uint64, unsigned long long)
MORI_IR_IMM_(int, int)
MORI_IR_IMM_(float, float)
MORI_IR_IMM_(double, double)

// ---- atomics ---------------------------------------------------------------------------------------

// The operand is read from local memory at valPtr, 4 or 8 bytes; other sizes are an invalid argument.
MORI_IR_API int mori_shmem_atomic_size_nonfetch_thread(unsigned long long dest, unsigned long long valPtr,
                                                       unsigned long long bytes, int op, int pe, int qp) {
  if (bytes == 4) {
    ShmemAtomicTypeNonFetchThread<unsigned int>(MORI_IR_TPTR(unsigned int, dest),
                                                *reinterpret_cast<const unsigned int*>(valPtr), op, pe, qp);
  } else if (bytes == 8) {
    ShmemAtomicTypeNonFetchThread<unsigned long long>(
        MORI_IR_TPTR(unsigned long long, dest), *reinterpret_cast<const unsigned long long*>(valPtr), op, pe, qp);
  } else {
    detail::SetError(MORI_SHMEM_GLOBAL_STATE, MORI_SHMEM_DEVICE_ERR_INVALID_ARGUMENT);
  }
  return 0;
}

#define MORI_IR_AMO_(name, T)                                                                             \
  MORI_IR_API int mori_shmem_atomic_##name##_nonfetch_thread(unsigned long long dest, T val, int op,     \
                                                             int pe, int qp) {                           \
    ShmemAtomicTypeNonFetchThread<T>(MORI_IR_TPTR(T, dest), val, op, pe, qp);                             \
    return 0;                                                                                             \
  }                                                                                                       \
  MORI_IR_API T mori_shmem_atomic_##name##_fetch_thread(unsigned long long dest, T val, T compare, int op, \
                                                        int pe, int qp) {                                 \
    return ShmemAtomicTypeFetchThread<T>(MORI_IR_TPTR(T, dest), val, compare, op, pe, qp);                \
  }                                                                                                       \
  MORI_IR_API int mori_shmem_##name##_atomic_add_thread(unsigned long long dest, T val, int pe, int qp) { \
    ShmemAtomicTypeNonFetchThread<T>(MORI_IR_TPTR(T, dest), val, AMO_ADD, pe, qp);                        \
    return 0;                                                                                             \
  }                                                                                                       \
  MORI_IR_API T mori_shmem_##name##_atomic_fetch_add_thread(unsigned long long dest, T val, int pe,      \
                                                            int qp) {                                     \
    return ShmemAtomicTypeFetchThread<T>(MORI_IR_TPTR(T, dest), val, static_cast<T>(0), AMO_FETCH_ADD, pe, qp);        \
  }
MORI_IR_AMO_(uint32, unsigned int)
MORI_IR_AMO_(uint64, unsigned long long)
MORI_IR_AMO_(int64, long long)

// ---- waits on a local word ---------------------------------------------------------------------------

#define MORI_IR_WAIT_(name, T)                                                                         \
  MORI_IR_API T mori_shmem_##name##_wait_until_greater_than(unsigned long long addr, T val) {          \
    return ShmemWaitUntil<T>(MORI_IR_TPTR(T, addr), SHMEM_CMP_GT, val);                                \
  }                                                                                                    \
  MORI_IR_API T mori_shmem_##name##_wait_until_equals(unsigned long long addr, T val) {                \
    return ShmemWaitUntil<T>(MORI_IR_TPTR(T, addr), SHMEM_CMP_EQ, val);                                \
  }                                                                                                    \
  MORI_IR_API T mori_shmem_##name##_wait_until(unsigned long long addr, int cmp, T val) {              \
    return ShmemWaitUntil<T>(MORI_IR_TPTR(T, addr), cmp, val);                                         \
  }                                                                                                    \
  MORI_IR_API int mori_shmem_##name##_test(unsigned long long addr, int cmp, T val) {                  \
    return ShmemTest<T>(MORI_IR_TPTR(T, addr), cmp, val) ? 1 : 0;                                      \
  }
MORI_IR_WAIT_(uint32, unsigned int)
MORI_IR_WAIT_(uint64, unsigned long long)
MORI_IR_WAIT_(int32, int)
MORI_IR_WAIT_(int64, long long)
