// SPDX-License-Identifier: MIT
// Test kernels for the mori-shmem device API (mori_shmem/mori_shmem_device.cuh).
//
// Every kernel is extern "C" and takes only: the state struct by value (mori_shmem_device_state_t,
// the `st` parameter; mori.shmem.DeviceState), pointers (64-bit device addresses), `int` (int32) and
// `unsigned long long` (uint64). The kernels marked "+ _global" below also exist as
// `<name>_global` with the same parameters minus `st`: those call the implicit forms, i.e. read
// the module global `mori_shmem_device_state`, which the host must fill after loading this module
// (shmem_module_init) before launching one. (Every kernel compile-checks both forms.)
//
// Common conventions:
//   scope   0 = thread, 1 = warp, 2 = block.
//   launch  <<<1, B>>> with B a multiple of 32 (B >= 32) unless a kernel says otherwise. Thread
//           scope: thread 0 does the operation, the others do nothing. Warp scope: warp 0
//           (threads 0..31) does it. Block scope: all B threads.
//   "symmetric" = an address in this PE's heap (what shmem_malloc returned, plus any offset);
//           data lands in / comes from the target PE's copy of it.
//   errors  are not reported by the kernels: they land in the PE's error word (heap_base + 8,
//           uint32; 1 wait timeout, 2 unreachable pe, 3 invalid argument, 4 bad address), which
//           mori_shmem_test_error_word reads.
//   dtype (typed RMA)  0 uint8, 1 int8, 2 uint16, 3 int16, 4 uint32, 5 int32, 6 uint64, 7 int64,
//           8 float32, 9 float64. (Immediate puts use 0..7.)
//   itype (atomics, waits)  0 int32, 1 uint32, 2 int64, 3 uint64, 4 long (int64), 5 unsigned long
//           (uint64); the last two exercise the Long/Ulong families. A 64-bit value argument
//           carries the operand in its low 4 / 8 bytes (numpy: value.astype(uint64) of the
//           two's-complement bits).
#include "mori_shmem/mori_shmem_device.cuh"

namespace ms = mori::shmem;
typedef mori_shmem_device_state_t State;

// Calls the explicit-state form, or with kGlobal the implicit (module-global) form. Both forms
// are instantiated either way, so every kernel also compile-checks the other form.
#define CALL(fn, ...) (kGlobal ? fn(__VA_ARGS__) : fn(st, __VA_ARGS__))
#define CALL0(fn) (kGlobal ? fn() : fn(st))

// Every kernel may be launched with up to 1024 threads per block: the bound caps registers at 64.
#define TEST_BOUNDS __launch_bounds__(1024, 1)

// Defines kernel `name` (explicit state) and `name_global` (module global) from body template
// `Body<kGlobal>(st, args...)`.
#define TEST_KERNEL_PAIR(name, Body, PARAMS, ARGS)                                            \
  extern "C" __global__ void TEST_BOUNDS name(State st, PARAMS) { Body<false>(st, ARGS); } \
  extern "C" __global__ void TEST_BOUNDS name##_global(PARAMS) { Body<true>(MORI_SHMEM_GLOBAL_STATE, ARGS); }
// Only the explicit-state kernel (the family's implicit forms are still compile-checked by CALL).
#define TEST_KERNEL_ONE(name, Body, PARAMS, ARGS) \
  extern "C" __global__ void TEST_BOUNDS name(State st, PARAMS) { Body<false>(st, ARGS); }
#define P(...) __VA_ARGS__
// OPS(Thread), OPS(Warp) or OPS(Block), chosen by the runtime `scope` (0, 1, else) in scope here.
#define BY_SCOPE(OPS)      \
  if (scope == 0) {        \
    OPS(Thread)            \
  } else if (scope == 1) { \
    OPS(Warp)              \
  } else {                 \
    OPS(Block)             \
  }

namespace {

__device__ __forceinline__ bool InGroup(int scope) {
  if (scope == 0) return threadIdx.x == 0;
  if (scope == 1) return threadIdx.x < 32;
  return true;
}

__device__ __forceinline__ unsigned long long LoadAcquireU64(const unsigned long long* p) {
  return ms::detail::LdAcquireSys(p);
}

// ---- put / get of bytes ------------------------------------------------------------------------

template <bool kGlobal>
__device__ void PutGetOnce(const State& st, int op, int scope, void* dest, const void* src, unsigned long long bytes,
                           int pe) {
#define PUT_GET_OPS(Scope)                                      \
  switch (op) {                                                 \
    case 0:                                                     \
      CALL(ms::ShmemPutMemNbi##Scope, dest, src, bytes, pe);    \
      break;                                                    \
    case 1:                                                     \
      CALL(ms::ShmemPutMem##Scope, dest, src, bytes, pe);       \
      break;                                                    \
    case 2:                                                     \
      CALL(ms::ShmemGetMemNbi##Scope, dest, src, bytes, pe, 0); \
      break;                                                    \
    default:                                                    \
      CALL(ms::ShmemGetMem##Scope, dest, src, bytes, pe, 1);    \
      break;                                                    \
  }
  BY_SCOPE(PUT_GET_OPS)
#undef PUT_GET_OPS
}

template <bool kGlobal>
__device__ void PutGet(const State& st, int op, int scope, void* dest, const void* src, unsigned long long bytes,
                       int pe) {
  if (InGroup(scope)) PutGetOnce<kGlobal>(st, op, scope, dest, src, bytes, pe);
}

template <bool kGlobal>
__device__ void PutGetSlices(const State& st, int op, int scope, void* dest, const void* src,
                             unsigned long long sliceBytes, int pe) {
  unsigned long long group;
  if (scope == 0) {
    group = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  } else if (scope == 1) {
    group = (static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  } else {
    group = blockIdx.x;
  }
  const unsigned long long off = group * sliceBytes;
  PutGetOnce<kGlobal>(st, op, scope, static_cast<char*>(dest) + off, static_cast<const char*>(src) + off, sliceBytes,
                      pe);
}

// ---- typed put / get ---------------------------------------------------------------------------

// The integer dtypes (codes 0-7) take the immediate puts too; the typed puts and gets add the
// floating-point ones.
#define FOR_EACH_INT_DTYPE(X)        \
  X(0, Uint8, unsigned char)         \
  X(1, Int8, signed char)            \
  X(2, Uint16, unsigned short)       \
  X(3, Int16, short)                 \
  X(4, Uint32, unsigned int)         \
  X(5, Int32, int)                   \
  X(6, Uint64, unsigned long long)   \
  X(7, Int64, long long)
#define FOR_EACH_RMA_DTYPE(X) \
  FOR_EACH_INT_DTYPE(X)       \
  X(8, Float, float)          \
  X(9, Double, double)

// The typed helpers are out of line so that no single function gets huge: ptxas time grows
// faster than linearly with function size.
template <bool kGlobal, typename T>
__device__ __noinline__ void TypedGeneric(const State& st, int op, int scope, void* destBytes, const void* srcBytes,
                                          unsigned long long n, int pe) {
  T* dest = static_cast<T*>(destBytes);
  const T* src = static_cast<const T*>(srcBytes);
#define TYPED_GENERIC_OPS(Scope)                                     \
  switch (op) {                                                      \
    case 0:                                                          \
      CALL(ms::ShmemPutTypeNbi##Scope<T>, dest, src, n, pe);         \
      break;                                                         \
    case 1:                                                          \
      CALL(ms::ShmemPutType##Scope<T>, dest, src, n, pe);            \
      break;                                                         \
    case 2:                                                          \
      CALL(ms::ShmemGetTypeNbi##Scope<T>, dest, src, n, pe);         \
      break;                                                         \
    default:                                                         \
      CALL(ms::ShmemGetType##Scope<T>, dest, src, n, pe, 0);         \
      break;                                                         \
  }
  BY_SCOPE(TYPED_GENERIC_OPS)
#undef TYPED_GENERIC_OPS
}

#define TYPED_NAMED_OPS(Name, T, Scope)                                                                     \
  switch (op) {                                                                                             \
    case 0:                                                                                                 \
      CALL(ms::ShmemPut##Name##Nbi##Scope, static_cast<T*>(dest), static_cast<const T*>(src), n, pe);      \
      break;                                                                                                \
    case 1:                                                                                                 \
      CALL(ms::ShmemPut##Name##Scope, static_cast<T*>(dest), static_cast<const T*>(src), n, pe);           \
      break;                                                                                                \
    case 2:                                                                                                 \
      CALL(ms::ShmemGet##Name##Nbi##Scope, static_cast<T*>(dest), static_cast<const T*>(src), n, pe);      \
      break;                                                                                                \
    default:                                                                                                \
      CALL(ms::ShmemGet##Name##Scope, static_cast<T*>(dest), static_cast<const T*>(src), n, pe, 0);        \
      break;                                                                                                \
  }

#define TYPED_NAMED_FN(code, Name, T)                                                                   \
  template <bool kGlobal>                                                                               \
  __device__ __noinline__ void TypedNamed##Name(const State& st, int op, int scope, void* dest,         \
                                                const void* src, unsigned long long n, int pe) {        \
    if (scope == 0) {                                                                                   \
      TYPED_NAMED_OPS(Name, T, Thread)                                                                  \
    } else if (scope == 1) {                                                                            \
      TYPED_NAMED_OPS(Name, T, Warp)                                                                    \
    } else {                                                                                            \
      TYPED_NAMED_OPS(Name, T, Block)                                                                   \
    }                                                                                                   \
  }
FOR_EACH_RMA_DTYPE(TYPED_NAMED_FN)
#undef TYPED_NAMED_FN

template <bool kGlobal>
__device__ void TypedPutGet(const State& st, int op, int scope, int dtype, int api, void* dest, const void* src,
                            unsigned long long n, int pe) {
  if (!InGroup(scope)) return;
  if (api == 0) {
    // The templates with the unsigned integer of the dtype's size: the data movement is the same
    // for every type of a size, and the named families below (which forward to these templates)
    // instantiate them for every dtype anyway, so this keeps the kernel's size in check.
    switch (dtype) {
      case 0:
      case 1:
        TypedGeneric<kGlobal, unsigned char>(st, op, scope, dest, src, n, pe);
        break;
      case 2:
      case 3:
        TypedGeneric<kGlobal, unsigned short>(st, op, scope, dest, src, n, pe);
        break;
      case 4:
      case 5:
      case 8:
        TypedGeneric<kGlobal, unsigned int>(st, op, scope, dest, src, n, pe);
        break;
      case 6:
      case 7:
      case 9:
        TypedGeneric<kGlobal, unsigned long long>(st, op, scope, dest, src, n, pe);
        break;
      default:
        break;
    }
  } else {
    switch (dtype) {
#define CASE(code, Name, T)                                        \
  case code:                                                       \
    TypedNamed##Name<kGlobal>(st, op, scope, dest, src, n, pe);   \
    break;
      FOR_EACH_RMA_DTYPE(CASE)
#undef CASE
      default:
        break;
    }
  }
}

// ---- immediate put -----------------------------------------------------------------------------

template <bool kGlobal>
__device__ void PutImm(const State& st, int api, int scope, int dtype, void* dest, unsigned long long value, int pe) {
  if (scope != 0 && scope != 1) return;
  if (!InGroup(scope)) return;
  // Warp scope: lane l offers value + l; only lane 0's value may land.
  const unsigned long long v = value + (scope == 1 ? threadIdx.x : 0);
  switch (dtype) {
#define CASE(code, Name, T)                                                                    \
  case code:                                                                                   \
    if (api == 0) {                                                                            \
      const T tv = static_cast<T>(v);                                                          \
      if (scope == 0) {                                                                        \
        CALL(ms::ShmemPutSizeImmNbiThread, dest, &tv, sizeof(T), pe);                          \
      } else {                                                                                 \
        CALL(ms::ShmemPutSizeImmNbiWarp, dest, &tv, sizeof(T), pe);                            \
      }                                                                                        \
    } else if (api == 1) {                                                                     \
      if (scope == 0) {                                                                        \
        CALL(ms::ShmemPutTypeImmNbiThread<T>, static_cast<T*>(dest), static_cast<T>(v), pe);   \
      } else {                                                                                 \
        CALL(ms::ShmemPutTypeImmNbiWarp<T>, static_cast<T*>(dest), static_cast<T>(v), pe);     \
      }                                                                                        \
    } else {                                                                                   \
      if (scope == 0) {                                                                        \
        CALL(ms::ShmemPut##Name##ImmNbiThread, static_cast<T*>(dest), static_cast<T>(v), pe);  \
      } else {                                                                                 \
        CALL(ms::ShmemPut##Name##ImmNbiWarp, static_cast<T*>(dest), static_cast<T>(v), pe, 0); \
      }                                                                                        \
    }                                                                                          \
    break;
    FOR_EACH_INT_DTYPE(CASE)
#undef CASE
    default:
      break;
  }
}

// ---- put with signal ---------------------------------------------------------------------------

template <bool kGlobal>
__device__ void PutSignalOnce(const State& st, int scope, int typed, void* dest, const void* src,
                              unsigned long long bytes, unsigned long long* sig, unsigned long long sigVal, int sigOp,
                              int pe) {
#define PUT_SIGNAL_OPS(Scope)                                                                                  \
  if (typed == 0) {                                                                                            \
    CALL(ms::ShmemPutMemNbiSignal##Scope, dest, src, bytes, sig, sigVal, sigOp, pe);                          \
  } else if (typed == 1) {                                                                                     \
    CALL(ms::ShmemPutTypeNbiSignal##Scope<unsigned int>, static_cast<unsigned int*>(dest),                    \
         static_cast<const unsigned int*>(src), bytes / 4, sig, sigVal, sigOp, pe);                           \
  } else {                                                                                                     \
    CALL(ms::ShmemPutMemNbiSignal##Scope, dest, src, bytes, reinterpret_cast<unsigned long*>(sig), sigVal,    \
         sigOp, pe, 0);                                                                                        \
  }
  BY_SCOPE(PUT_SIGNAL_OPS)
#undef PUT_SIGNAL_OPS
}

template <bool kGlobal>
__device__ void PutSignal(const State& st, int scope, int typed, void* dest, const void* src, unsigned long long bytes,
                          unsigned long long* sig, unsigned long long sigVal, int sigOp, int pe) {
  if (InGroup(scope)) PutSignalOnce<kGlobal>(st, scope, typed, dest, src, bytes, sig, sigVal, sigOp, pe);
}

// ---- atomics -----------------------------------------------------------------------------------

#define FOR_EACH_AMO_ITYPE(X)      \
  X(0, Int32, int)                 \
  X(1, Uint32, unsigned int)       \
  X(2, Int64, long long)           \
  X(3, Uint64, unsigned long long) \
  X(4, Long, long)                 \
  X(5, Ulong, unsigned long)

template <typename T>
__device__ __forceinline__ unsigned long long Bits64(T v) {
  return static_cast<unsigned long long>(ms::detail::BitCast<ms::detail::BitsOf<T>>(v));
}

template <bool kGlobal, typename T>
__device__ unsigned long long AtomicGeneric(const State& st, int scope, int amo, T* dest, T v, T c, int pe) {
  const bool fetch = amo >= mori::core::AMO_FETCH && amo <= mori::core::AMO_COMPARE_SWAP;
  if (scope == 0) {
    if (fetch) return Bits64(CALL(ms::ShmemAtomicTypeFetchThread<T>, dest, v, c, amo, pe));
    CALL(ms::ShmemAtomicTypeNonFetchThread<T>, dest, v, amo, pe);
  } else {
    if (fetch) return Bits64(CALL(ms::ShmemAtomicTypeFetchWarp<T>, dest, v, c, amo, pe, 0));
    CALL(ms::ShmemAtomicTypeNonFetchWarp<T>, dest, v, amo, pe, 0);
  }
  return 0;
}

#define ATOMIC_NAMED(Name, T)                                                                             \
  template <bool kGlobal>                                                                                 \
  __device__ unsigned long long AtomicNamed##Name(const State& st, int scope, int api, int amo, T* dest, T v, \
                                                  T c, int pe) {                                          \
    const bool fetch = amo >= mori::core::AMO_FETCH && amo <= mori::core::AMO_COMPARE_SWAP;               \
    if (scope == 0) {                                                                                     \
      if (api == 2 && amo == mori::core::AMO_ADD) {                                                       \
        CALL(ms::Shmem##Name##AtomicAddThread, dest, v, pe);                                              \
        return 0;                                                                                         \
      }                                                                                                   \
      if (api == 2 && amo == mori::core::AMO_FETCH_ADD) {                                                 \
        return Bits64(CALL(ms::Shmem##Name##AtomicFetchAddThread, dest, v, pe));                          \
      }                                                                                                   \
      if (fetch) return Bits64(CALL(ms::ShmemAtomic##Name##FetchThread, dest, v, c, amo, pe));            \
      CALL(ms::ShmemAtomic##Name##NonFetchThread, dest, v, amo, pe);                                      \
    } else {                                                                                              \
      if (api == 2 && amo == mori::core::AMO_ADD) {                                                       \
        CALL(ms::Shmem##Name##AtomicAddWarp, dest, v, pe, 0);                                             \
        return 0;                                                                                         \
      }                                                                                                   \
      if (api == 2 && amo == mori::core::AMO_FETCH_ADD) {                                                 \
        return Bits64(CALL(ms::Shmem##Name##AtomicFetchAddWarp, dest, v, pe, 0));                         \
      }                                                                                                   \
      if (fetch) return Bits64(CALL(ms::ShmemAtomic##Name##FetchWarp, dest, v, c, amo, pe, 0));           \
      CALL(ms::ShmemAtomic##Name##NonFetchWarp, dest, v, amo, pe, 0);                                     \
    }                                                                                                     \
    return 0;                                                                                             \
  }
#define ATOMIC_NAMED_X(code, Name, T) ATOMIC_NAMED(Name, T)
FOR_EACH_AMO_ITYPE(ATOMIC_NAMED_X)
#undef ATOMIC_NAMED_X

template <bool kGlobal>
__device__ void Atomic(const State& st, int scope, int api, int amo, int itype, unsigned long long value,
                       unsigned long long compare, int pe, void* dest, unsigned long long* out) {
  if (scope != 0 && scope != 1) return;
  if (!InGroup(scope)) return;
  unsigned long long old = 0;
  switch (itype) {
#define CASE(code, Name, T)                                                                                  \
  case code: {                                                                                               \
    typedef ms::detail::BitsOf<T> U;                                                                         \
    const T v = ms::detail::BitCast<T>(static_cast<U>(value));                                               \
    const T c = ms::detail::BitCast<T>(static_cast<U>(compare));                                             \
    if (api == 0) {                                                                                          \
      old = AtomicGeneric<kGlobal, T>(st, scope, amo, static_cast<T*>(dest), v, c, pe);                      \
    } else {                                                                                                 \
      old = AtomicNamed##Name<kGlobal>(st, scope, api, amo, static_cast<T*>(dest), v, c, pe);                \
    }                                                                                                        \
    break;                                                                                                   \
  }
    FOR_EACH_AMO_ITYPE(CASE)
#undef CASE
    default:
      break;
  }
  if (scope == 0) {
    out[0] = old;
    out[1] = 0;
  } else {
    // Every lane must have received lane 0's value.
    const unsigned long long lane0 = __shfl_sync(0xffffffffu, old, 0);
    const unsigned int differ = __popc(__ballot_sync(0xffffffffu, old != lane0));
    if (threadIdx.x == 0) {
      out[0] = lane0;
      out[1] = differ;
    }
  }
}

// ---- wait / test -------------------------------------------------------------------------------

#define WAIT_NAMED(Name, T)                                                                                   \
  template <bool kGlobal>                                                                                     \
  __device__ unsigned long long WaitNamed##Name(const State& st, int gt, T* ivar, T v) {                      \
    if (gt) return Bits64(CALL(ms::Shmem##Name##WaitUntilGreaterThan, ivar, v));                              \
    return Bits64(CALL(ms::Shmem##Name##WaitUntilEquals, ivar, v));                                           \
  }
#define WAIT_NAMED_X(code, Name, T) WAIT_NAMED(Name, T)
FOR_EACH_AMO_ITYPE(WAIT_NAMED_X)
#undef WAIT_NAMED_X

template <bool kGlobal>
__device__ void WaitTest(const State& st, int api, int itype, int cmp, void* ivar, unsigned long long value,
                         unsigned long long* out) {
  if (threadIdx.x != 0) return;
  switch (itype) {
#define CASE(code, Name, T)                                                                             \
  case code: {                                                                                          \
    typedef ms::detail::BitsOf<T> U;                                                                    \
    T* p = static_cast<T*>(ivar);                                                                       \
    const T v = ms::detail::BitCast<T>(static_cast<U>(value));                                          \
    if (api == 0) {                                                                                     \
      out[0] = Bits64(CALL(ms::ShmemWaitUntil<T>, p, cmp, v));                                          \
      out[1] = CALL(ms::ShmemTest<T>, p, cmp, v) ? 1 : 0;                                               \
    } else if (api == 1) {                                                                              \
      out[0] = WaitNamed##Name<kGlobal>(st, 1, p, v);                                                   \
      out[1] = CALL(ms::ShmemTest<T>, p, ms::SHMEM_CMP_GT, v) ? 1 : 0;                                  \
    } else if (api == 2) {                                                                              \
      out[0] = WaitNamed##Name<kGlobal>(st, 0, p, v);                                                   \
      out[1] = CALL(ms::ShmemTest<T>, p, ms::SHMEM_CMP_EQ, v) ? 1 : 0;                                  \
    } else {                                                                                            \
      out[1] = CALL(ms::ShmemTest<T>, p, cmp, v) ? 1 : 0;                                               \
      out[0] = Bits64(*static_cast<volatile T*>(p));                                                    \
    }                                                                                                   \
    break;                                                                                              \
  }
    FOR_EACH_AMO_ITYPE(CASE)
#undef CASE
    default:
      break;
  }
}

// ---- signal / wait ping-pong -------------------------------------------------------------------

__device__ __forceinline__ unsigned char PingPongPattern(unsigned long long i, int round) {
  return static_cast<unsigned char>(i * 31u + static_cast<unsigned long long>(round) * 101u + (i >> 10));
}

template <bool kGlobal>
__device__ void SignalPingPong(const State& st, int role, int mode, int scope, int sigOp, unsigned char* buf,
                               unsigned long long bytes, unsigned long long* sig, int peer, int rounds,
                               unsigned long long* out) {
  __shared__ unsigned long long sMismatch;
  __shared__ int sAbort;
  const unsigned int tid = threadIdx.x;
  const unsigned int nthreads = blockDim.x;
  if (tid == 0) {
    sMismatch = 0;
    sAbort = 0;
  }
  __syncthreads();
  int done = 0;
  for (int r = 1; r <= rounds; ++r) {
    if (role == 0) {
      // Writer. The reader must be done with round r-1 before its buffer is overwritten.
      if (tid == 0 && r > 1 &&
          CALL(ms::ShmemWaitUntil<unsigned long long>, sig + 1, ms::SHMEM_CMP_GE, r - 1) <
              static_cast<unsigned long long>(r - 1)) {
        sAbort = 1;
      }
      __syncthreads();
      if (sAbort) break;
      // The local copy of buf is the source: this PE's buf is written by nobody else.
      for (unsigned long long i = tid; i < bytes; i += nthreads) buf[i] = PingPongPattern(i, r);
      __syncthreads();
      if (InGroup(scope)) {
        if (mode == 0) {
          const unsigned long long sigVal =
              (sigOp == mori::core::SIGNAL_ADD || sigOp == mori::core::AMO_ADD) ? 1ull : static_cast<unsigned long long>(r);
          PutSignalOnce<kGlobal>(st, scope, 0, buf, buf, bytes, sig, sigVal, sigOp, peer);
        } else {
          // Put, make it visible before the flag, then a relaxed immediate flag store.
          PutGetOnce<kGlobal>(st, mode == 3 ? 1 : 0, scope, buf, buf, bytes, peer);
          if (tid == 0) {
            if (mode == 1) {
              CALL(ms::ShmemFenceThread, peer);
            } else if (mode == 2) {
              CALL(ms::ShmemQuietThread, peer, 0);
            } else if (mode == 3) {
              CALL0(ms::ShmemFenceThread);
            } else {
              CALL0(ms::ShmemQuietThread);
            }
            CALL(ms::ShmemPutUint64ImmNbiThread, sig, static_cast<unsigned long long>(r), peer);
          }
        }
      }
      done = r;
    } else {
      // Reader.
      if (tid == 0 && CALL(ms::ShmemWaitUntil<unsigned long long>, sig, ms::SHMEM_CMP_GE, r) <
                          static_cast<unsigned long long>(r)) {
        sAbort = 1;
      }
      __syncthreads();
      if (sAbort) break;
      unsigned long long bad = 0;
      for (unsigned long long i = tid; i < bytes; i += nthreads) bad += buf[i] != PingPongPattern(i, r);
      if (bad) atomicAdd(&sMismatch, bad);
      __syncthreads();  // every thread's reads are done before the ack lets the writer go on
      if (tid == 0) {
        CALL(ms::ShmemAtomicTypeNonFetchThread<unsigned long long>, sig + 1, static_cast<unsigned long long>(r),
             mori::core::SIGNAL_SET, peer);
      }
      done = r;
    }
  }
  if (role == 0 && done == rounds && tid == 0) {
    // Let the kernel end only after the reader has checked the last round.
    if (CALL(ms::ShmemWaitUntil<unsigned long long>, sig + 1, ms::SHMEM_CMP_GE, rounds) <
        static_cast<unsigned long long>(rounds)) {
      done = rounds - 1;
    }
  }
  __syncthreads();
  if (tid == 0) {
    out[0] = sMismatch;
    out[1] = static_cast<unsigned long long>(done);
  }
}

// ---- device barrier loop -----------------------------------------------------------------------

template <bool kGlobal>
__device__ void BarrierLoop(const State& st, int scope, int rounds, unsigned long long* counter,
                            unsigned long long* out) {
  const int npes = CALL0(ms::ShmemNPes);
  unsigned long long bad = 0, last = 0;
  for (int r = 1; r <= rounds; ++r) {
    if (scope == 0) {
      if (threadIdx.x == 0) {
        for (int p = 0; p < npes; ++p) CALL(ms::ShmemUint64AtomicAddThread, counter, 1ull, p);
        CALL0(ms::ShmemBarrierAllThread);
        last = LoadAcquireU64(counter);
        bad += last != static_cast<unsigned long long>(r) * npes;
        CALL0(ms::ShmemBarrierAllThread);  // nobody adds for round r+1 before everyone checked r
      }
    } else {
      // Threads other than 0 do the adds, so the block barrier must carry them.
      for (int p = static_cast<int>(threadIdx.x); p < npes; p += static_cast<int>(blockDim.x)) {
        CALL(ms::ShmemAtomicTypeNonFetchThread<unsigned long long>, counter, 1ull, mori::core::AMO_ADD, p);
      }
      CALL0(ms::ShmemBarrierAllBlock);
      if (threadIdx.x == 0) {
        last = LoadAcquireU64(counter);
        bad += last != static_cast<unsigned long long>(r) * npes;
      }
      CALL0(ms::ShmemBarrierAllBlock);
    }
  }
  if (threadIdx.x == 0) {
    out[0] = bad;
    out[1] = last;
  }
}

// ---- queries -----------------------------------------------------------------------------------

template <bool kGlobal>
__device__ void PtrP2p(const State& st, const void* addr, int pe, unsigned long long* out) {
  if (threadIdx.x != 0) return;
  const int me = CALL0(ms::ShmemMyPe);
  out[0] = reinterpret_cast<unsigned long long>(CALL(ms::ShmemPtrP2p, addr, pe));
  out[1] = reinterpret_cast<unsigned long long>(CALL(ms::ShmemPtrP2p, addr, me, pe));
  out[2] = static_cast<unsigned long long>(static_cast<long long>(me));
  out[3] = static_cast<unsigned long long>(static_cast<long long>(CALL0(ms::ShmemNPes)));
}

}  // namespace

// -------------------------------------------------------------------------------------------------
// mori_shmem_test_put_get(st, int op, int scope, void* dest, const void* src, u64 bytes, int pe)   + _global
//   One put or get of `bytes` bytes (any count, any alignment of dest/src).
//   op 0 ShmemPutMemNbi{Scope}, 1 ShmemPutMem{Scope}, 2 ShmemGetMemNbi{Scope}, 3 ShmemGetMem{Scope}.
//   Put: dest symmetric, src local -> writes pe's dest[0, bytes). Get: src symmetric (pe's copy is
//   read), dest local -> writes local dest[0, bytes). Nothing else is written.
TEST_KERNEL_PAIR(mori_shmem_test_put_get, PutGet,
                 P(int op, int scope, void* dest, const void* src, unsigned long long bytes, int pe),
                 P(op, scope, dest, src, bytes, pe))

// mori_shmem_test_put_get_slices(st, int op, int scope, void* dest, const void* src, u64 sliceBytes, int pe)
//   Any grid and block shape (blockDim.x a multiple of 32 for warp scope). Every group g moves its
//   own slice [g*sliceBytes, (g+1)*sliceBytes) of dest/src with the op/scope of put_get, where g is
//   the global thread index (scope 0), global warp index (scope 1) or blockIdx.x (scope 2).
//   Total bytes moved = number of groups * sliceBytes. Many groups at once; also the bandwidth
//   benchmark (e.g. 132 blocks x 1024 threads, scope 2, op 0).
TEST_KERNEL_ONE(mori_shmem_test_put_get_slices, PutGetSlices,
                 P(int op, int scope, void* dest, const void* src, unsigned long long sliceBytes, int pe),
                 P(op, scope, dest, src, sliceBytes, pe))

// mori_shmem_test_typed_put_get(st, int op, int scope, int dtype, int api, void* dest, const void* src,
//                               u64 nelems, int pe)
//   As put_get with nelems elements of dtype (bytes = nelems * size). api 0: the templates
//   ShmemPutTypeNbi{Scope}<T>, ShmemPutType{Scope}<T>, ShmemGetTypeNbi{Scope}<T>, ShmemGetType{Scope}<T>
//   (op 0..3) with T the unsigned integer of the dtype's size (same bytes moved); api 1: the named ShmemPut{Name}Nbi{Scope}, ShmemPut{Name}{Scope}, ShmemGet{Name}Nbi{Scope},
//   ShmemGet{Name}{Scope}. Writes exactly what put_get would write for the same bytes. An unknown
//   dtype does nothing.
TEST_KERNEL_ONE(mori_shmem_test_typed_put_get, TypedPutGet,
                 P(int op, int scope, int dtype, int api, void* dest, const void* src, unsigned long long nelems,
                   int pe),
                 P(op, scope, dtype, api, dest, src, nelems, pe))

// mori_shmem_test_put_imm(st, int api, int scope, int dtype, void* dest, u64 value, int pe)   + _global
//   One immediate put of a dtype (0..7) scalar to pe's copy of the symmetric, naturally aligned
//   dest: writes the low size(dtype) bytes of `value` there, nothing else. scope 0 or 1 only.
//   api 0 ShmemPutSizeImmNbi{Thread,Warp}(dest, &v, size), 1 ShmemPutTypeImmNbi{Thread,Warp}<T>,
//   2 ShmemPut{Name}ImmNbi{Thread,Warp}. Warp scope: lane l passes value + l, so the result must
//   be the low bytes of `value` (lane 0's) exactly.
TEST_KERNEL_PAIR(mori_shmem_test_put_imm, PutImm,
                 P(int api, int scope, int dtype, void* dest, unsigned long long value, int pe),
                 P(api, scope, dtype, dest, value, pe))

// mori_shmem_test_put_signal(st, int scope, int typed, void* dest, const void* src, u64 bytes,
//                            u64* sig, u64 sigVal, int sigOp, int pe)
//   ShmemPutMemNbiSignal{Scope}: writes pe's dest[0, bytes) from local src, then updates pe's 64-bit
//   word at symmetric sig: sigOp 9 (SIGNAL_SET) / 3 (AMO_SET) store sigVal, 10 (SIGNAL_ADD) /
//   4 (AMO_ADD) add sigVal. typed 0: byte form; 1: ShmemPutTypeNbiSignal{Scope}<unsigned int> with
//   bytes / 4 elements (bytes must be a multiple of 4); 2: byte form with the signal word typed
//   unsigned long*. Another sigOp records ERR_INVALID_ARGUMENT and writes nothing.
TEST_KERNEL_ONE(mori_shmem_test_put_signal, PutSignal,
                 P(int scope, int typed, void* dest, const void* src, unsigned long long bytes,
                   unsigned long long* sig, unsigned long long sigVal, int sigOp, int pe),
                 P(scope, typed, dest, src, bytes, sig, sigVal, sigOp, pe))

// mori_shmem_test_atomic(st, int scope, int api, int amo, int itype, u64 value, u64 compare, int pe,
//                        void* dest, u64* out)
//   One atomic `amo` (mori_shmem_amo_t code) on pe's copy of the symmetric integer dest of type
//   itype (0..5), operand value (and compare for COMPARE_SWAP). scope 0 (thread 0) or 1 (warp 0).
//   Codes 12..19 go to the fetching call, any other code to the non-fetching one (which records
//   ERR_INVALID_ARGUMENT for an unknown code). api 0: ShmemAtomicTypeFetch/NonFetch{Scope}<T>;
//   api 1: ShmemAtomic{Name}Fetch/NonFetch{Scope}; api 2: for AMO_ADD Shmem{Name}AtomicAdd{Scope},
//   for AMO_FETCH_ADD Shmem{Name}AtomicFetchAdd{Scope}, otherwise as api 1.
//   Writes out[0] = the old value's bits zero-extended to 64 (0 for a non-fetching op or a failed
//   one), out[1] = how many lanes of the warp got a value different from lane 0's (0 expected;
//   always 0 for thread scope).
TEST_KERNEL_ONE(mori_shmem_test_atomic, Atomic,
                 P(int scope, int api, int amo, int itype, unsigned long long value, unsigned long long compare,
                   int pe, void* dest, unsigned long long* out),
                 P(scope, api, amo, itype, value, compare, pe, dest, out))

// mori_shmem_test_wait_test(st, int api, int itype, int cmp, void* ivar, u64 value, u64* out)   + _global
//   Thread 0 only; any launch. ivar is a LOCAL integer of type itype (0..5).
//   api 0: out[0] = ShmemWaitUntil<T>(ivar, cmp, value) (the value that satisfied it, or the last
//          one seen on timeout), then out[1] = ShmemTest<T>(ivar, cmp, value).
//   api 1: out[0] = Shmem{Name}WaitUntilGreaterThan(ivar, value), out[1] = ShmemTest(ivar, GT, value).
//   api 2: out[0] = Shmem{Name}WaitUntilEquals(ivar, value), out[1] = ShmemTest(ivar, EQ, value).
//   api 3: no wait: out[1] = ShmemTest<T>(ivar, cmp, value), out[0] = the current value.
//   Values are zero-extended bit patterns. cmp: 0 EQ, 1 NE, 2 GT, 3 LE, 4 LT, 5 GE (signed
//   comparison for signed types). For a timeout test pass a state with a small spin_timeout_ns:
//   the error word becomes 1.
TEST_KERNEL_PAIR(mori_shmem_test_wait_test, WaitTest,
                 P(int api, int itype, int cmp, void* ivar, unsigned long long value, unsigned long long* out),
                 P(api, itype, cmp, ivar, value, out))

// mori_shmem_test_signal_pingpong(st, int role, int mode, int scope, int sigOp, unsigned char* buf,   + _global
//                                 u64 bytes, u64* sig, int peer, int rounds, u64* out)
//   Ordering stress between two PEs, launched together (<<<1, B>>> on each): PE a with role 0
//   (writer), PE b with role 1 (reader), each naming the other as peer. buf (bytes long, any
//   offset) and sig (2 x u64, 8-aligned) are symmetric; sig must be 0 on both PEs before launch.
//   Round r = 1..rounds: the writer fills its own buf with pattern(i, r) =
//   (uint8)(i*31 + r*101 + (i >> 10)), puts it into the reader's buf with `scope`, and raises the
//   reader's sig[0] to r:
//     mode 0  ShmemPutMemNbiSignal{Scope} with sigOp (SIGNAL_SET/AMO_SET: value r; SIGNAL_ADD/AMO_ADD:
//             value 1);
//     mode 1  ShmemPutMemNbi{Scope}, ShmemFenceThread(peer), ShmemPutUint64ImmNbiThread(sig, r);
//     mode 2  ShmemPutMemNbi{Scope}, ShmemQuietThread(peer, 0), immediate flag as mode 1;
//     mode 3  ShmemPutMem{Scope} (blocking), ShmemFenceThread(), immediate flag;
//     mode 4  ShmemPutMemNbi{Scope}, ShmemQuietThread(), immediate flag.
//   The reader waits for sig[0] >= r, compares every byte of its buf with pattern(i, r), then
//   acks with ShmemAtomicTypeNonFetchThread<u64>(sig + 1, r, SIGNAL_SET, peer); the writer waits
//   for that ack before the next round (and after the last).
//   Writes out[0] = mismatched bytes seen by this PE (always 0 on the writer), out[1] = rounds
//   completed (== rounds unless a wait timed out). Afterwards the reader's buf holds
//   pattern(i, rounds) and sig = {rounds, 0} on the reader, {0, rounds} on the writer.
TEST_KERNEL_PAIR(mori_shmem_test_signal_pingpong, SignalPingPong,
                 P(int role, int mode, int scope, int sigOp, unsigned char* buf, unsigned long long bytes,
                   unsigned long long* sig, int peer, int rounds, unsigned long long* out),
                 P(role, mode, scope, sigOp, buf, bytes, sig, peer, rounds, out))

// mori_shmem_test_barrier_loop(st, int scope, int rounds, u64* counter, u64* out)   + _global
//   Every PE launches it at once, <<<1, B>>> (exactly one block per PE). counter is a symmetric u64,
//   0 on every PE before launch. Round r = 1..rounds: this PE adds 1 to counter on every PE
//   (ShmemUint64AtomicAddThread; scope 1: ShmemAtomicTypeNonFetchThread<u64>(AMO_ADD) spread over
//   the block's threads), device barrier (scope 0: ShmemBarrierAllThread by thread 0; scope 1:
//   ShmemBarrierAllBlock), then checks that its local counter == r * n_pes, then a second barrier.
//   Writes out[0] = rounds whose check failed (0 expected), out[1] = the last counter value seen
//   (rounds * n_pes); afterwards counter == rounds * n_pes on every PE.
TEST_KERNEL_PAIR(mori_shmem_test_barrier_loop, BarrierLoop,
                 P(int scope, int rounds, unsigned long long* counter, unsigned long long* out),
                 P(scope, rounds, counter, out))

// mori_shmem_test_ptr_p2p(st, const void* addr, int pe, u64* out)   + _global
//   Thread 0 only. Writes out[0] = ShmemPtrP2p(addr, pe), out[1] = ShmemPtrP2p(addr, ShmemMyPe(), pe)
//   (MORI's 3-argument form; same value), out[2] = ShmemMyPe(), out[3] = ShmemNPes(). out[0] is 0
//   when addr is outside the heap or pe is out of range / unreachable; for pe == my_pe it is addr.
TEST_KERNEL_PAIR(mori_shmem_test_ptr_p2p, PtrP2p, P(const void* addr, int pe, unsigned long long* out),
                 P(addr, pe, out))

// mori_shmem_test_error_word(st, int clear, unsigned int* out)   (no _global twin)
//   Thread 0 only. Writes out[0] = this PE's device error word (heap_base + 8); with clear != 0
//   then resets it to 0. Does nothing to out when the state was never filled (heap_base 0).
extern "C" __global__ void TEST_BOUNDS mori_shmem_test_error_word(State st, int clear, unsigned int* out) {
  if (threadIdx.x != 0 || st.heap_base == 0) return;
  unsigned int* word = ms::detail::ErrorWord(st);
  out[0] = clear ? atomicExch_system(word, 0u) : ms::detail::LdRelaxedSys(word);
}
