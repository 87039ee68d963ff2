// SPDX-License-Identifier: MIT
// The byte copy under every put and get, shared by a group of threads (1, a warp, a block).
//
// Speed comes from three things:
//   - the widest access the pair of addresses allows: 16-byte vectors when dst and src agree
//     modulo 16, else 8, else 4 bytes, with byte heads and tails; addresses that disagree modulo 4
//     still move 4-byte words, each stitched from two aligned source words with a funnel shift;
//   - memory-level parallelism: each thread issues kUnroll loads before the matching stores, so
//     kUnroll vectors per thread are in flight (a bulk copy is bound by bytes in flight, not by
//     instructions);
//   - LDG/STG rather than generic LD/ST for the common case, both sides global memory and
//     agreeing modulo 16; anything else (the local side in shared memory, odd alignments) takes
//     generic accesses, which move the same bytes per instruction.
// Thread i of the group takes vectors i, i + n, i + 2n, ... so each warp instruction covers
// consecutive addresses (full coalescing, whole 32-byte sectors).
//
// The copy is one out-of-line function per module, not inlined at every put: inlined, it costs
// ~3 KB of SASS and ~0.2 s of ptxas per call site, which adds up to minutes for kernels with
// many puts, while the call costs a few dozen cycles against the microseconds of a remote
// transfer. Define MORI_SHMEM_INLINE_COPY before including the device headers to inline it.
#pragma once

#include "ptx.cuh"

namespace mori::shmem::detail {

// Loads and stores of the generic path are plain C++, so the compiler picks what the address
// allows; the global path pins LDG/STG (ptx.cuh).
template <bool kGlobal>
struct Mem {
  template <typename V>
  __device__ __forceinline__ static V Load(const V* p) {
    return *p;
  }
  template <typename V>
  __device__ __forceinline__ static void Store(V* p, const V& v) {
    *p = v;
  }
};
template <>
struct Mem<true> {
  template <typename V>
  __device__ __forceinline__ static V Load(const V* p) {
    return LdGlobal(p);
  }
  template <typename V>
  __device__ __forceinline__ static void Store(V* p, const V& v) {
    StGlobal(p, v);
  }
};

__device__ __forceinline__ void CopyScalarBytes(char* dst, const char* src, unsigned long long n, unsigned int tid,
                                                unsigned int nthreads) {
  for (unsigned long long i = tid; i < n; i += nthreads) dst[i] = src[i];
}

// n vectors of type V; dst and src aligned to sizeof(V). One loop for whole and partial chunks:
// the bounds test is a 32-bit compare against loop-invariant offsets, cheaper than a second,
// unguarded copy of the loop in code size and compile time.
template <bool kGlobal, int kUnroll, typename V>
__device__ __forceinline__ void CopyVectors(V* dst, const V* src, unsigned long long n, unsigned int tid,
                                            unsigned int nthreads) {
  typedef Mem<kGlobal> M;
  const unsigned int chunk = nthreads * kUnroll;  // at most 1024 * 8
  for (unsigned long long base = 0; base < n; base += chunk) {
    const unsigned long long left = n - base;
    const unsigned int limit = left < chunk ? static_cast<unsigned int>(left) : chunk;
    const V* s = src + base;
    V* d = dst + base;
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const unsigned int i = u * nthreads + tid;
      if (i < limit) v[u] = M::Load(s + i);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const unsigned int i = u * nthreads + tid;
      if (i < limit) M::Store(d + i, v[u]);
    }
  }
}

// n 4-byte words to a 4-byte aligned dst from a src that is not 4-byte aligned: word j is the
// 4 bytes at src + 4j, read as two aligned words w[j], w[j+1] (w = src rounded down) and shifted.
// Both words hold bytes of the source range, so nothing outside it (beyond its own aligned
// words) is read.
template <bool kGlobal, int kUnroll>
__device__ __forceinline__ void CopyShiftedWords(unsigned int* dst, const char* src, unsigned long long n,
                                                 unsigned int tid, unsigned int nthreads) {
  typedef Mem<kGlobal> M;
  const unsigned int shift = 8u * static_cast<unsigned int>(reinterpret_cast<unsigned long long>(src) & 3u);
  const unsigned int* w = reinterpret_cast<const unsigned int*>(reinterpret_cast<unsigned long long>(src) & ~3ull);
  const unsigned int chunk = nthreads * kUnroll;
  for (unsigned long long base = 0; base < n; base += chunk) {
    const unsigned long long left = n - base;
    const unsigned int limit = left < chunk ? static_cast<unsigned int>(left) : chunk;
    const unsigned int* s = w + base;
    unsigned int* d = dst + base;
    unsigned int lo[kUnroll], hi[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const unsigned int i = u * nthreads + tid;
      if (i < limit) {
        lo[u] = M::Load(s + i);
        hi[u] = M::Load(s + i + 1);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const unsigned int i = u * nthreads + tid;
      if (i < limit) M::Store(d + i, __funnelshift_r(lo[u], hi[u], shift));
    }
  }
}

// Fewer than kAlign bytes with (dst - src) % kAlign == 0, by one thread, in the widest pieces
// below kAlign that dst's alignment allows: an 8-byte put (a flag, a scalar) is one store, not
// eight byte stores that its signal's release must then wait for.
template <int kAlign>
__device__ __forceinline__ void CopyFragment(char* dst, const char* src, unsigned long long n, unsigned int tid) {
  if (tid != 0) return;
  while (n != 0) {
    const unsigned long long at = reinterpret_cast<unsigned long long>(dst);
    unsigned int piece = 1;
    if (kAlign > 8 && n >= 8 && (at & 7) == 0) {
      *reinterpret_cast<unsigned long long*>(dst) = *reinterpret_cast<const unsigned long long*>(src);
      piece = 8;
    } else if (kAlign > 4 && n >= 4 && (at & 3) == 0) {
      *reinterpret_cast<unsigned int*>(dst) = *reinterpret_cast<const unsigned int*>(src);
      piece = 4;
    } else if (kAlign > 2 && n >= 2 && (at & 1) == 0) {
      *reinterpret_cast<unsigned short*>(dst) = *reinterpret_cast<const unsigned short*>(src);
      piece = 2;
    } else {
      *dst = *src;
    }
    dst += piece;
    src += piece;
    n -= piece;
  }
}

// Head until dst is kAlign-aligned, kAlign-byte vectors, tail. Requires (dst - src) % kAlign == 0
// (kShifted: requires only dst alignment, src is stitched, and head and tail go byte by byte).
template <bool kGlobal, int kUnroll, int kAlign, typename V, bool kShifted>
__device__ __forceinline__ void CopyAligned(char* dst, const char* src, unsigned long long bytes, unsigned int tid,
                                            unsigned int nthreads) {
  unsigned long long head = (0ull - reinterpret_cast<unsigned long long>(dst)) & (kAlign - 1);
  if (head > bytes) head = bytes;
  if constexpr (kShifted) {
    CopyScalarBytes(dst, src, head, tid, nthreads);
  } else {
    CopyFragment<kAlign>(dst, src, head, tid);
  }
  const unsigned long long n = (bytes - head) / kAlign;
  if constexpr (kShifted) {
    CopyShiftedWords<kGlobal, kUnroll>(reinterpret_cast<unsigned int*>(dst + head), src + head, n, tid, nthreads);
  } else {
    CopyVectors<kGlobal, kUnroll>(reinterpret_cast<V*>(dst + head), reinterpret_cast<const V*>(src + head), n, tid,
                                  nthreads);
  }
  const unsigned long long done = head + n * kAlign;
  if constexpr (kShifted) {
    CopyScalarBytes(dst + done, src + done, bytes - done, tid, nthreads);
  } else {
    CopyFragment<kAlign>(dst + done, src + done, bytes - done, tid);
  }
}

// Generic accesses, any alignment.
template <int kUnroll>
__device__ __forceinline__ void CopyBytesAnyAlignment(char* dst, const char* src, unsigned long long bytes,
                                                      unsigned int tid, unsigned int nthreads) {
  const unsigned long long skew = reinterpret_cast<unsigned long long>(dst) ^ reinterpret_cast<unsigned long long>(src);
  if ((skew & 15) == 0) {
    CopyAligned<false, kUnroll, 16, uint4, false>(dst, src, bytes, tid, nthreads);
  } else if ((skew & 7) == 0) {
    CopyAligned<false, kUnroll, 8, uint2, false>(dst, src, bytes, tid, nthreads);
  } else if ((skew & 3) == 0) {
    CopyAligned<false, kUnroll, 4, unsigned int, false>(dst, src, bytes, tid, nthreads);
  } else {
    CopyAligned<false, kUnroll, 4, unsigned int, true>(dst, src, bytes, tid, nthreads);
  }
}

#ifdef MORI_SHMEM_INLINE_COPY
#define MORI_SHMEM_COPY_INLINE_ __forceinline__
#else
#define MORI_SHMEM_COPY_INLINE_ __noinline__
#endif

// Copies bytes from src to dst, shared by threads tid = 0 .. nthreads-1 of a group that all call
// it with the same arguments. No synchronisation and no ordering beyond program order: callers
// add the group barrier and any fence. Ranges must not overlap.
template <int kUnroll>
__device__ MORI_SHMEM_COPY_INLINE_ void CopyBytes(void* dst, const void* src, unsigned long long bytes,
                                                  unsigned int tid, unsigned int nthreads) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const unsigned long long skew = reinterpret_cast<unsigned long long>(d) ^ reinterpret_cast<unsigned long long>(s);
  if ((skew & 15) == 0 && __isGlobal(d) && __isGlobal(s)) {
    CopyAligned<true, kUnroll, 16, uint4, false>(d, s, bytes, tid, nthreads);
  } else {
    CopyBytesAnyAlignment<kUnroll>(d, s, bytes, tid, nthreads);
  }
}

#undef MORI_SHMEM_COPY_INLINE_

// ---- thread groups ---------------------------------------------------------------------------
// Vectors of 16 bytes in flight per thread: 8 for a thread or a warp, which have few threads to
// spread a copy over; 4 for a block, whose hundreds of threads keep as many bytes in flight with
// half the registers: called in a loop, the 8-deep copy needs ~160 registers a thread (one
// 512-thread block per SM), the 4-deep one fits in 64 without spilling (two blocks per SM), which
// took block-scope puts of 256 MiB from 94 % to 97-103 % of the device copy on an H200. A module
// that puts at block scope and at a smaller one carries both copy functions.

struct ThreadGroup {
  static constexpr int kUnroll = 8;
  __device__ __forceinline__ static unsigned int Rank() { return 0; }
  __device__ __forceinline__ static unsigned int Size() { return 1; }
  __device__ __forceinline__ static void Sync() {}
};

// All 32 lanes must take part (full-mask __syncwarp / __shfl_sync).
struct WarpGroup {
  static constexpr int kUnroll = 8;
  __device__ __forceinline__ static unsigned int Rank() { return LaneId(); }
  __device__ __forceinline__ static unsigned int Size() { return 32; }
  __device__ __forceinline__ static void Sync() { __syncwarp(); }
};

// Every thread of the block must take part (__syncthreads).
struct BlockGroup {
  static constexpr int kUnroll = 4;
  __device__ __forceinline__ static unsigned int Rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  }
  __device__ __forceinline__ static unsigned int Size() { return blockDim.x * blockDim.y * blockDim.z; }
  __device__ __forceinline__ static void Sync() { __syncthreads(); }
};

// A group's copy. One thread's copy of one aligned 8- or 4-byte word (a flag, a scalar) is made
// inline: the out-of-line call measured about 0.2 us of an 8-byte put-with-signal's 1.3 us.
template <typename G>
__device__ __forceinline__ void GroupCopy(void* dst, const void* src, unsigned long long bytes) {
  if (G::Size() == 1) {
    const unsigned long long at = reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src);
    if (bytes == 8 && (at & 7) == 0) {
      *static_cast<unsigned long long*>(dst) = *static_cast<const unsigned long long*>(src);
      return;
    }
    if (bytes == 4 && (at & 3) == 0) {
      *static_cast<unsigned int*>(dst) = *static_cast<const unsigned int*>(src);
      return;
    }
  }
  CopyBytes<G::kUnroll>(dst, src, bytes, G::Rank(), G::Size());
}

}  // namespace mori::shmem::detail
