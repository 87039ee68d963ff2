// SPDX-License-Identifier: MIT
// The collectives of the CUDA backend: one kernel, mori_cco_collective, specialised at JIT time by
//   MORI_CCO_KIND   MORI_CCO_ALL_REDUCE_ONE_SHOT / _TWO_SHOT / MORI_CCO_ALL_GATHER / _ALL_TO_ALL
//   MORI_CCO_DTYPE  MORI_CCO_DTYPE_* (copies move count * sizeof(dtype) bytes per rank)
//   MORI_CCO_OP     MORI_CCO_OP_* (reductions only)
//   MORI_CCO_WIRE   MORI_CCO_WIRE_NATIVE / _FP8 (all-reduce of float dtypes only)
//   MORI_CCO_WORLD  the LSA team size, which must equal args.comm.lsa_size
// following collective_args.h's protocol and scratch layout to the letter (the cpu backend runs
// the same one): stage into my scratch buffer, arrive/wait on LSA barrier barrier_base + block,
// read the peers' staged data through the flat VA.
//
// Launch contract: a 1-D block of whole warps, at most kMaxThreads threads; the same grid on
// every rank and in every call of a communicator. Block b of every rank stages exactly the
// elements that block b of every rank reads (the partition below depends only on count, world
// and gridDim.x), so each block synchronises only with its namesakes on the peers: LSA barriers
// barrier_base + [0, grid) (two-shot: + [0, 2 * grid)). The calls of a communicator run in one
// stream order on each rank: a peer that reached call k+1 has finished call k, which is what
// lets call k+2 reuse call k's scratch buffer without a closing barrier.
//
// Reductions run in float32 (int32/int64 in their own type, wrapping) in rank order
// 0 .. world-1, starting from rank 0's value, so every rank computes bit-identical results.

// A kernel here has two to four copy sites: inlined, they cost some compile time, while the
// out-of-line copy's call makes ptxas save (spill) a third of the 128 registers at every call.
#define MORI_SHMEM_INLINE_COPY
#include <mori_shmem/device/convert.cuh>
#include <mori_shmem/device/copy.cuh>
#include <mori_shmem/device/ptx.cuh>

#include "collective_args.h"
#include "mori_cco/cco_device.cuh"

#ifndef MORI_CCO_KIND
#error "MORI_CCO_KIND must be defined"
#endif
#ifndef MORI_CCO_DTYPE
#error "MORI_CCO_DTYPE must be defined"
#endif
#ifndef MORI_CCO_WORLD
#error "MORI_CCO_WORLD must be defined"
#endif
#ifndef MORI_CCO_OP
#define MORI_CCO_OP MORI_CCO_OP_SUM
#endif
#ifndef MORI_CCO_WIRE
#define MORI_CCO_WIRE MORI_CCO_WIRE_NATIVE
#endif

namespace mori::cco::collectives {

using device::word_t;
using shmem::detail::LdGlobal;
using shmem::detail::StGlobal;

constexpr int kKind = MORI_CCO_KIND;
constexpr int kDtype = MORI_CCO_DTYPE;
constexpr int kOp = MORI_CCO_OP;
constexpr int kWire = MORI_CCO_WIRE;
constexpr int kWorld = MORI_CCO_WORLD;
constexpr bool kReduce = kKind == MORI_CCO_ALL_REDUCE_ONE_SHOT || kKind == MORI_CCO_ALL_REDUCE_TWO_SHOT;
constexpr bool kFp8 = kReduce && kWire == MORI_CCO_WIRE_FP8;
constexpr bool kFloatType =
    kDtype == MORI_CCO_DTYPE_FLOAT32 || kDtype == MORI_CCO_DTYPE_BFLOAT16 || kDtype == MORI_CCO_DTYPE_FLOAT16;

// The launch bound: 512 threads a block, one block an SM at least, i.e. up to 128 registers a
// thread. Without the explicit minimum of one block, ptxas (CUDA 13) aims at 64 and spills.
constexpr unsigned kMaxThreads = 512;
constexpr unsigned long long kFp8Block = MORI_CCO_FP8_BLOCK;
constexpr float kFp8Max = 448.0f;
// Unit of the block partition: reductions split on whole fp8 blocks (so one block computes each
// scale, and two-shot slices, whole fp8 blocks too, split the same way), copies on 16 bytes.
constexpr unsigned long long kReduceUnit = kFp8Block;
constexpr unsigned long long kCopyUnit = 16;
// Vectors in flight per thread of a copy: 4 x 16 bytes x 8192 threads is 512 KiB in flight, ample
// for NVLink; 8 would make ptxas spill with several inlined copy sites.
constexpr int kCopyUnroll = 4;

static_assert(kKind >= MORI_CCO_ALL_REDUCE_ONE_SHOT && kKind <= MORI_CCO_ALL_TO_ALL, "unknown MORI_CCO_KIND");
static_assert(kDtype >= MORI_CCO_DTYPE_FLOAT32 && kDtype <= MORI_CCO_DTYPE_UINT8, "unknown MORI_CCO_DTYPE");
static_assert(kOp >= MORI_CCO_OP_SUM && kOp <= MORI_CCO_OP_MIN, "unknown MORI_CCO_OP");
static_assert(kWire == MORI_CCO_WIRE_NATIVE || kWire == MORI_CCO_WIRE_FP8, "unknown MORI_CCO_WIRE");
static_assert(kWorld >= 1 && kWorld <= 64, "MORI_CCO_WORLD out of range");
static_assert(!kReduce || kDtype != MORI_CCO_DTYPE_UINT8, "uint8 is for byte copies, not reductions");
static_assert(!kFp8 || kFloatType, "the fp8 wire carries float32 / bfloat16 / float16 only");

// ---- element types -------------------------------------------------------------------------

// Storage type S (what memory holds) and accumulator type Acc of each dtype.
template <int D>
struct Elem;
// A type held and accumulated as itself.
template <typename T>
struct Plain {
  typedef T S;
  typedef T Acc;
  __device__ __forceinline__ static Acc load(S v) { return v; }
  __device__ __forceinline__ static S store(Acc v) { return v; }
};
// A 16-bit float held as its bits and accumulated in float, through the given conversions.
template <float (*ToFloat)(unsigned short), unsigned short (*FromFloat)(float)>
struct Half {
  typedef unsigned short S;
  typedef float Acc;
  __device__ __forceinline__ static Acc load(S v) { return ToFloat(v); }
  __device__ __forceinline__ static S store(Acc f) { return FromFloat(f); }
};
template <>
struct Elem<MORI_CCO_DTYPE_FLOAT32> : Plain<float> {};
template <>
struct Elem<MORI_CCO_DTYPE_BFLOAT16> : Half<shmem::detail::Bf16ToFloat, shmem::detail::FloatToBf16> {};
template <>
struct Elem<MORI_CCO_DTYPE_FLOAT16> : Half<shmem::detail::Fp16ToFloat, shmem::detail::FloatToFp16> {};
template <>
struct Elem<MORI_CCO_DTYPE_INT32> : Plain<int> {};
template <>
struct Elem<MORI_CCO_DTYPE_INT64> : Plain<long long> {};
// Bytes are only copied; the conversions exist so the reduction code compiles in every variant.
template <>
struct Elem<MORI_CCO_DTYPE_UINT8> {
  typedef unsigned char S;
  typedef int Acc;
  __device__ __forceinline__ static Acc load(S v) { return v; }
  __device__ __forceinline__ static S store(Acc v) { return static_cast<S>(v); }
};

typedef Elem<kDtype> E;
typedef E::S S;
typedef E::Acc Acc;
constexpr unsigned long long kElemSize = sizeof(S);

// Elements per thread step of a reduction: 16 bytes of each peer's native data (so 8 peers stay
// within the register budget even for int64), or 8 fp8 codes, whose sum is stored as 8 elements.
constexpr int kGroup = kFp8 ? 8 : (kElemSize >= 16 ? 1 : static_cast<int>(16 / kElemSize));

// max/min as std::max/std::min (the cpu backend's), so NaN and signed zeros come out the same;
// float sums are never fused with a neighbouring multiply; integer sums wrap (computed unsigned:
// signed overflow is undefined in C++).
__device__ __forceinline__ float Combine(float a, float b) {
  if constexpr (kOp == MORI_CCO_OP_MAX) return a < b ? b : a;
  if constexpr (kOp == MORI_CCO_OP_MIN) return b < a ? b : a;
  return __fadd_rn(a, b);
}
__device__ __forceinline__ int Combine(int a, int b) {
  if constexpr (kOp == MORI_CCO_OP_MAX) return a < b ? b : a;
  if constexpr (kOp == MORI_CCO_OP_MIN) return b < a ? b : a;
  return static_cast<int>(static_cast<unsigned>(a) + static_cast<unsigned>(b));
}
__device__ __forceinline__ long long Combine(long long a, long long b) {
  if constexpr (kOp == MORI_CCO_OP_MAX) return a < b ? b : a;
  if constexpr (kOp == MORI_CCO_OP_MIN) return b < a ? b : a;
  return static_cast<long long>(static_cast<unsigned long long>(a) + static_cast<unsigned long long>(b));
}

// ---- fp8 e4m3fn (OCP: bias 7, no infinities, max 448, NaN = S.1111.111) --------------------
// Encoding rounds to nearest even and saturates to +-448 (NaN stays NaN); decoding is exact.
// sm_89+ does both in one instruction per pair; older targets take the same arithmetic in software.

__device__ __forceinline__ unsigned SoftFloatToE4m3(float x) {
  const unsigned sign = (__float_as_uint(x) >> 24) & 0x80u;
  const float a = fabsf(x);
  if (a != a) return sign | 0x7Fu;
  if (a >= kFp8Max) return sign | 0x7Eu;
  if (a < 0.015625f) return sign | static_cast<unsigned>(__float2int_rn(a * 512.0f));  // subnormal: 2^-9 steps
  const int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xFFu) - 127;             // -6 .. 8
  const int q = __float2int_rn(a * __uint_as_float(static_cast<unsigned>(127 - e + 3) << 23));  // 8 .. 16
  return sign | static_cast<unsigned>(((e + 7) << 3) + (q - 8));  // q == 16 carries into the exponent
}

__device__ __forceinline__ float SoftE4m3ToFloat(unsigned b) {
  const unsigned exp = (b >> 3) & 0xFu, mant = b & 7u;
  float v;
  if ((b & 0x7Fu) == 0x7Fu) {
    v = __uint_as_float(0x7FC00000u);
  } else if (exp == 0) {
    v = static_cast<float>(mant) * 0.001953125f;  // 2^-9
  } else {
    v = static_cast<float>(8u + mant) * __uint_as_float((127u + exp - 10u) << 23);
  }
  return (b & 0x80u) ? -v : v;
}

// Two floats to two codes, a in the low byte.
__device__ __forceinline__ unsigned FloatsToE4m3x2(float a, float b) {
#if __CUDA_ARCH__ >= 890
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  return r;
#else
  return SoftFloatToE4m3(a) | (SoftFloatToE4m3(b) << 8);
#endif
}

// Two codes (low byte first) to floats.
__device__ __forceinline__ void E4m3x2ToFloats(unsigned v, float& a, float& b) {
#if __CUDA_ARCH__ >= 890
  unsigned h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(static_cast<unsigned short>(v & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(a) : "h"(static_cast<unsigned short>(h2 & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(b) : "h"(static_cast<unsigned short>(h2 >> 16)));
#else
  a = SoftE4m3ToFloat(v & 0xFFu);
  b = SoftE4m3ToFloat((v >> 8) & 0xFFu);
#endif
}

__device__ __forceinline__ float E4m3ToFloat(unsigned code) {
  float a, b;
  E4m3x2ToFloats(code, a, b);
  return a;
}

// amax / 448, or 1 for an all-zero block (any scale reproduces zeros; 1 keeps it finite).
__device__ __forceinline__ float Fp8Scale(float amax) { return amax > 0.0f ? __fdiv_rn(amax, kFp8Max) : 1.0f; }

// ---- vector access to kGroup elements (16-byte aligned) -------------------------------------

constexpr int kGroupVecs = static_cast<int>(kGroup * kElemSize / 16 > 0 ? kGroup * kElemSize / 16 : 1);

union Group {
  uint4 v[kGroupVecs];
  S s[kGroup];
};

__device__ __forceinline__ void LoadGroup(const S* p, Group& g) {
#pragma unroll
  for (int i = 0; i < kGroupVecs; ++i) g.v[i] = LdGlobal(reinterpret_cast<const uint4*>(p) + i);
}

__device__ __forceinline__ void StoreGroup(S* p, const Acc (&acc)[kGroup]) {
  Group g;
#pragma unroll
  for (int i = 0; i < kGroup; ++i) g.s[i] = E::store(acc[i]);
#pragma unroll
  for (int i = 0; i < kGroupVecs; ++i) StGlobal(reinterpret_cast<uint4*>(p) + i, g.v[i]);
}

// ---- the scratch buffer of one call --------------------------------------------------------

struct Scratch {
  unsigned long long staged;  // local address of LSA rank 0's buffer; rank j's is + j * stride
  unsigned long long stride;  // per_rank_size
  unsigned long long scales;  // fp8: offset of the scales inside the staged region
  unsigned long long reduced; // two-shot: offset of the reduced region inside the buffer

  __device__ __forceinline__ char* at(int peer, unsigned long long offset) const {
    return reinterpret_cast<char*>(staged + static_cast<unsigned long long>(peer) * stride + offset);
  }
};

__device__ __forceinline__ Scratch MakeScratch(const mori_cco_collective_args_t& a) {
  Scratch s;
  // Read before this call's first barrier advances the epoch (collective_args.h: why the epoch).
  const unsigned long long epoch =
      *reinterpret_cast<volatile unsigned long long*>(mori::cco::device::barrier_epoch_word(a.comm, a.barrier_base + blockIdx.x));
  s.staged = a.comm.flat_base + a.scratch_offset + (epoch & 1ull) * a.scratch_half;
  s.stride = a.comm.per_rank_size;
  s.scales = mori_cco_fp8_scales_offset(a.count);
  s.reduced = mori_cco_staged_bytes(a.count, kElemSize, kWire);
  return s;
}

// ---- the block partition -------------------------------------------------------------------

struct Range {
  unsigned long long lo, hi;  // [lo, hi), possibly empty
};

// Block b's part of [begin, end): a contiguous run of whole units (the last one may be short),
// the same on every rank because it depends only on the bounds, the unit and gridDim.x.
__device__ __forceinline__ Range BlockPart(unsigned long long begin, unsigned long long end, unsigned long long unit) {
  const unsigned long long n = end > begin ? end - begin : 0;
  const unsigned long long units = (n + unit - 1) / unit;
  const unsigned long long per = (units + gridDim.x - 1) / gridDim.x * unit;
  const unsigned long long lo = static_cast<unsigned long long>(blockIdx.x) * per;
  Range r;
  r.lo = begin + (lo < n ? lo : n);
  r.hi = begin + (lo + per < n ? lo + per : n);
  return r;
}

// Two-shot slice s: [s * L, min(count, (s + 1) * L)).
__device__ __forceinline__ Range Slice(unsigned long long count, int s) {
  const unsigned long long len = mori_cco_slice_len(count, kWorld);
  const unsigned long long lo = static_cast<unsigned long long>(s) * len;
  Range r;
  r.lo = lo < count ? lo : count;
  r.hi = lo + len < count ? lo + len : count;
  return r;
}

__device__ __forceinline__ void CopyBytes(void* dst, const void* src, unsigned long long bytes) {
  shmem::detail::CopyBytes<kCopyUnroll>(dst, src, bytes, threadIdx.x, blockDim.x);
}

// Whole-block LSA barrier `index`; false on every thread when it expired (error word set).
__device__ __forceinline__ bool BlockBarrier(const mori_cco_dev_comm_t& comm, unsigned index) {
  device::LsaBarrierSession<device::CoopBlock> barrier(device::CoopBlock{}, comm, index);
  return barrier.sync();
}

// ---- staging -------------------------------------------------------------------------------

// Quantises input elements [r.lo, r.hi) (r.lo on an fp8 block boundary) into my staged codes and
// scales: one warp per fp8 block, 4 elements per lane, the amax reduced across the warp.
__device__ void StageFp8(const mori_cco_collective_args_t& a, const Scratch& sc, Range r) {
  if constexpr (kFp8) {
    const S* in = reinterpret_cast<const S*>(a.input);
    unsigned char* codes = reinterpret_cast<unsigned char*>(sc.at(a.comm.lsa_rank, 0));
    float* scales = reinterpret_cast<float*>(sc.at(a.comm.lsa_rank, sc.scales));
    const bool vec = (a.input & (4 * kElemSize - 1)) == 0;
    const unsigned lane = threadIdx.x & 31u;
    const unsigned warps = blockDim.x >> 5;
    for (unsigned long long blk = r.lo / kFp8Block + (threadIdx.x >> 5); blk * kFp8Block < r.hi; blk += warps) {
      const unsigned long long e = blk * kFp8Block + lane * 4;
      float f[4];
      if (vec && e + 4 <= r.hi) {
        if constexpr (kElemSize == 4) {
          const uint4 v = LdGlobal(reinterpret_cast<const uint4*>(in + e));
          f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y);
          f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
        } else {
          const uint2 v = LdGlobal(reinterpret_cast<const uint2*>(in + e));
          f[0] = E::load(static_cast<S>(v.x & 0xFFFFu)), f[1] = E::load(static_cast<S>(v.x >> 16));
          f[2] = E::load(static_cast<S>(v.y & 0xFFFFu)), f[3] = E::load(static_cast<S>(v.y >> 16));
        }
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) f[k] = e + k < r.hi ? E::load(in[e + k]) : 0.0f;
      }
      float amax = fmaxf(fmaxf(fabsf(f[0]), fabsf(f[1])), fmaxf(fabsf(f[2]), fabsf(f[3])));
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
      const float scale = Fp8Scale(amax);
      // Multiplying by the rounded reciprocal (as the cpu backend does) instead of dividing keeps
      // quantisation off the slow IEEE division path; it moves a code by one step at most rarely.
      const float inverse = __frcp_rn(scale);
      // Codes past the count (the last block's padding) are written too: the region holds them.
      const unsigned word = FloatsToE4m3x2(__fmul_rn(f[0], inverse), __fmul_rn(f[1], inverse)) |
                            (FloatsToE4m3x2(__fmul_rn(f[2], inverse), __fmul_rn(f[3], inverse)) << 16);
      StGlobal(reinterpret_cast<unsigned*>(codes + e), word);
      if (lane == 0) scales[blk] = scale;
    }
  }
}

// My input elements [r.lo, r.hi) into my staged region, in the wire format.
__device__ __forceinline__ void StageElements(const mori_cco_collective_args_t& a, const Scratch& sc, Range r) {
  if constexpr (kFp8) {
    StageFp8(a, sc, r);
  } else {
    CopyBytes(sc.at(a.comm.lsa_rank, r.lo * kElemSize), reinterpret_cast<const char*>(a.input) + r.lo * kElemSize,
              (r.hi - r.lo) * kElemSize);
  }
}

// ---- reading and reducing the peers' staged data -------------------------------------------

// Element group starting at element i (a multiple of kGroup) of every peer's staged data, loaded
// all before any is used, so kWorld loads per thread are in flight.
struct Wire {
  Group native[kFp8 ? 1 : kWorld];
  uint2 codes[kFp8 ? kWorld : 1];
  float scale[kFp8 ? kWorld : 1];
};

__device__ __forceinline__ void LoadWire(const Scratch& sc, unsigned long long i, Wire& w) {
#pragma unroll
  for (int p = 0; p < kWorld; ++p) {
    if constexpr (kFp8) {
      w.codes[p] = LdGlobal(reinterpret_cast<const uint2*>(sc.at(p, i)));
      const unsigned* scale = reinterpret_cast<const unsigned*>(sc.at(p, sc.scales + i / kFp8Block * 4));
      w.scale[p] = __uint_as_float(LdGlobal(scale));
    } else {
      LoadGroup(reinterpret_cast<const S*>(sc.at(p, i * kElemSize)), w.native[p]);
    }
  }
}

// Peer p's group as accumulator values (fp8: dequantised; the product is rounded before the sum,
// never fused, so the result does not depend on the compiler's contraction choices).
__device__ __forceinline__ void Decode(const Wire& w, int p, Acc (&v)[kGroup]) {
  if constexpr (kFp8) {
    const unsigned words[2] = {w.codes[p].x, w.codes[p].y};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      float f0, f1, f2, f3;
      E4m3x2ToFloats(words[k] & 0xFFFFu, f0, f1);
      E4m3x2ToFloats(words[k] >> 16, f2, f3);
      v[4 * k] = __fmul_rn(f0, w.scale[p]);
      v[4 * k + 1] = __fmul_rn(f1, w.scale[p]);
      v[4 * k + 2] = __fmul_rn(f2, w.scale[p]);
      v[4 * k + 3] = __fmul_rn(f3, w.scale[p]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kGroup; ++k) v[k] = E::load(w.native[p].s[k]);
  }
}

// Peer p's element i, without alignment requirements.
__device__ __forceinline__ Acc LoadScalar(const Scratch& sc, int p, unsigned long long i) {
  if constexpr (kFp8) {
    const unsigned code = *reinterpret_cast<const unsigned char*>(sc.at(p, i));
    const float scale = *reinterpret_cast<const float*>(sc.at(p, sc.scales + i / kFp8Block * 4));
    return __fmul_rn(E4m3ToFloat(code), scale);
  } else {
    return E::load(*reinterpret_cast<const S*>(sc.at(p, i * kElemSize)));
  }
}

// Reduces elements [r.lo, r.hi) (r.lo a multiple of kGroup) over every peer's staged data in rank
// order and stores the result at out (and out2, when not null), indexed by element.
__device__ void ReduceRange(const Scratch& sc, Range r, S* out, S* out2, bool vec) {
  unsigned long long tail = r.lo;
  if (vec) {
    const unsigned long long groups = (r.hi - r.lo) / kGroup;
    for (unsigned long long g = threadIdx.x; g < groups; g += blockDim.x) {
      const unsigned long long i = r.lo + g * kGroup;
      Wire w;
      LoadWire(sc, i, w);
      Acc acc[kGroup];
      Decode(w, 0, acc);
#pragma unroll
      for (int p = 1; p < kWorld; ++p) {
        Acc v[kGroup];
        Decode(w, p, v);
#pragma unroll
        for (int k = 0; k < kGroup; ++k) acc[k] = Combine(acc[k], v[k]);
      }
      StoreGroup(out + i, acc);
      if (out2 != nullptr) StoreGroup(out2 + i, acc);
    }
    tail = r.lo + groups * kGroup;
  }
  for (unsigned long long i = tail + threadIdx.x; i < r.hi; i += blockDim.x) {
    Acc acc = LoadScalar(sc, 0, i);
#pragma unroll
    for (int p = 1; p < kWorld; ++p) acc = Combine(acc, LoadScalar(sc, p, i));
    out[i] = E::store(acc);
    if (out2 != nullptr) out2[i] = E::store(acc);
  }
}

// Whether the group path may run: every address it touches 16-byte aligned (staged and reduced
// regions are 256-byte aligned inside the buffer; the user's tensors usually are).
__device__ __forceinline__ bool Aligned(const mori_cco_collective_args_t& a) {
  return ((a.input | a.output | a.scratch_offset | a.scratch_half | a.comm.flat_base | a.comm.per_rank_size) & 15) == 0;
}

// ---- the four kinds ------------------------------------------------------------------------

__device__ __forceinline__ void AllReduceOneShot(const mori_cco_collective_args_t& a) {
  const Scratch sc = MakeScratch(a);
  const Range mine = BlockPart(0, a.count, kReduceUnit);
  StageElements(a, sc, mine);
  if (!BlockBarrier(a.comm, a.barrier_base + blockIdx.x)) return;
  ReduceRange(sc, mine, reinterpret_cast<S*>(a.output), nullptr, Aligned(a));
}

// Phase 1 reduces my slice (this block's part of it) into my reduced region and, directly, into
// my output; phase 2 gathers the other slices from their owners' reduced regions.
__device__ __forceinline__ void AllReduceTwoShot(const mori_cco_collective_args_t& a) {
  const Scratch sc = MakeScratch(a);
  const int me = a.comm.lsa_rank;
  for (int s = 0; s < kWorld; ++s) {
    const Range slice = Slice(a.count, s);
    StageElements(a, sc, BlockPart(slice.lo, slice.hi, kReduceUnit));
  }
  if (!BlockBarrier(a.comm, a.barrier_base + blockIdx.x)) return;
  const Range slice = Slice(a.count, me);
  const Range part = BlockPart(slice.lo, slice.hi, kReduceUnit);
  S* reduced = reinterpret_cast<S*>(sc.at(me, sc.reduced));
  ReduceRange(sc, part, reduced, reinterpret_cast<S*>(a.output), Aligned(a));
  if (!BlockBarrier(a.comm, a.barrier_base + gridDim.x + blockIdx.x)) return;
  char* out = reinterpret_cast<char*>(a.output);
  for (int p = 0; p < kWorld; ++p) {
    if (p == me) continue;
    const Range theirs = Slice(a.count, p);
    const Range r = BlockPart(theirs.lo, theirs.hi, kReduceUnit);
    CopyBytes(out + r.lo * kElemSize, sc.at(p, sc.reduced + r.lo * kElemSize), (r.hi - r.lo) * kElemSize);
  }
}

// Where AllGather and AllToAll start: the staging scratch, my rank, the bytes of one chunk of count
// elements, this block's part of such a chunk, and the input and output as bytes.
struct ChunkCopy {
  Scratch sc;
  int me;
  unsigned long long bytes;
  Range r;
  const char* in;
  char* out;
};
__device__ __forceinline__ ChunkCopy MakeChunkCopy(const mori_cco_collective_args_t& a) {
  const unsigned long long bytes = a.count * kElemSize;
  return {MakeScratch(a), a.comm.lsa_rank, bytes, BlockPart(0, bytes, kCopyUnit),
          reinterpret_cast<const char*>(a.input), reinterpret_cast<char*>(a.output)};
}

// Rank p's count elements land at output + p * count. My own chunk is copied from my input: the
// staged copy exists for the peers.
__device__ __forceinline__ void AllGather(const mori_cco_collective_args_t& a) {
  const auto [sc, me, bytes, r, in, out] = MakeChunkCopy(a);
  CopyBytes(sc.at(me, r.lo), in + r.lo, r.hi - r.lo);
  CopyBytes(out + me * bytes + r.lo, in + r.lo, r.hi - r.lo);
  if (!BlockBarrier(a.comm, a.barrier_base + blockIdx.x)) return;
  for (int p = 0; p < kWorld; ++p) {
    if (p != me) CopyBytes(out + p * bytes + r.lo, sc.at(p, r.lo), r.hi - r.lo);
  }
}

// Input chunk d (count elements) goes to rank d; output chunk p comes from rank p. The chunk I
// keep goes straight from input to output; the others are staged at their input offsets.
__device__ __forceinline__ void AllToAll(const mori_cco_collective_args_t& a) {
  const auto [sc, me, bytes, r, in, out] = MakeChunkCopy(a);
  for (int d = 0; d < kWorld; ++d) {
    const unsigned long long at = d * bytes + r.lo;
    CopyBytes(d == me ? out + at : sc.at(me, at), in + at, r.hi - r.lo);
  }
  if (!BlockBarrier(a.comm, a.barrier_base + blockIdx.x)) return;
  for (int p = 0; p < kWorld; ++p) {
    if (p != me) CopyBytes(out + p * bytes + r.lo, sc.at(p, me * bytes + r.lo), r.hi - r.lo);
  }
}

}  // namespace mori::cco::collectives

extern "C" __global__ void __launch_bounds__(mori::cco::collectives::kMaxThreads, 1)
    mori_cco_collective(const __grid_constant__ mori_cco_collective_args_t args) {
  using namespace mori::cco::collectives;
  // A module built for another team size would address the wrong slots: refuse on every block
  // (no barrier is entered, so the epochs stay consistent on every rank).
  if (args.comm.lsa_size != kWorld) {
    if (blockIdx.x == 0 && threadIdx.x == 0) mori::cco::device::record_error(args.comm, MORI_CCO_ERR_BAD_PEER);
    return;
  }
  if constexpr (kKind == MORI_CCO_ALL_REDUCE_ONE_SHOT) {
    AllReduceOneShot(args);
  } else if constexpr (kKind == MORI_CCO_ALL_REDUCE_TWO_SHOT) {
    AllReduceTwoShot(args);
  } else if constexpr (kKind == MORI_CCO_ALL_GATHER) {
    AllGather(args);
  } else {
    AllToAll(args);
  }
}
