// SPDX-License-Identifier: MIT
// Intra-host combine, in two kernels so that no block ever waits on blocks that may not be
// resident (several PEs share one GPU under MPS, and a grid may be larger than one wave):
//   mori_ep_combine_stage  with an external input, copies the received rows' expert outputs into
//                          the registered buffer (cast to fp8, with per-block scales for the
//                          blockwise format) and their weights; the last block then enters the
//                          cross-PE barrier (adds 1 to its slot on every PE) and waits until
//                          every PE has entered it for this call;
//   mori_ep_combine        a warp (or several, splitting the row, for few tokens) per local
//                          token reads the rows its destinations hold for it, straight from their
//                          buffers, and sums them in fp32 in top-k order, weights likewise.
// The barrier spans the PEs [local_first, +local_count). With MORI_EP_NET (an inter-node proxy,
// src/cpu/net.cpp) mori_ep_combine sums its node's rows for each record it forwarded into a reply
// (rows = the hop buffer's, dest map = the forward's), and mori_ep_net_sum adds each token's
// replies.
// The protocol is src/cpu/combine.cpp's. Compile-time constants: MORI_EP_WORLD, MORI_EP_TOPK,
// MORI_EP_DTYPE (element type of the rows, MORI_EP_DTYPE_*), MORI_EP_QUANT (wire format), MORI_EP_NET.
#include "ep_kernel.cuh"
#include "ep_fp4.cuh"
#include "ep_slots.h"

#ifndef MORI_EP_DTYPE
#error "MORI_EP_DTYPE must be defined"
#endif
#ifndef MORI_EP_QUANT
#define MORI_EP_QUANT MORI_EP_QUANT_NONE
#endif
#ifndef MORI_EP_NET
#define MORI_EP_NET 0
#endif
#ifndef MORI_EP_STAGE_STEPS
#define MORI_EP_STAGE_STEPS 2
#endif

namespace mori::ep {

constexpr int kDtype = MORI_EP_DTYPE;
constexpr int kQuant = MORI_EP_QUANT;
constexpr int kGroup = 8;  // elements per lane step: 16 bytes of bf16/fp16, 8 of fp8, 32 of fp32
constexpr bool kFp8Rows = kDtype == MORI_EP_DTYPE_FP8_E4M3FN || kDtype == MORI_EP_DTYPE_FP8_E4M3FNUZ;
constexpr int kElemBytes = kDtype == MORI_EP_DTYPE_FP32 ? 4 : (kFp8Rows ? 1 : 2);
constexpr bool kFp4Wire = kQuant == MORI_EP_QUANT_FP4_BLOCKWISE;
constexpr bool kBlockwise = kQuant == MORI_EP_QUANT_FP8_BLOCKWISE || kFp4Wire;
// Bytes of one group of kGroup elements on the wire: fp4 packs two a byte.
constexpr int kWireGroupBytes = kQuant == MORI_EP_QUANT_NONE ? kGroup * kElemBytes : (kFp4Wire ? kGroup / 2 : kGroup);

static_assert(kQuant == MORI_EP_QUANT_NONE || kDtype == MORI_EP_DTYPE_BF16, "fp8 combine formats take bf16 rows");

__device__ __forceinline__ float Decode(unsigned short v) {
  if constexpr (kDtype == MORI_EP_DTYPE_BF16) return Bf16ToFloat(v);
  return Fp16ToFloat(v);
}
__device__ __forceinline__ unsigned short Encode(float f) {
  if constexpr (kDtype == MORI_EP_DTYPE_BF16) return FloatToBf16(f);
  return FloatToFp16(f);
}

// Eight elements of a row in the input dtype, as floats.
__device__ __forceinline__ void LoadRow8(const char* p, float (&f)[kGroup]) {
  if constexpr (kFp8Rows) {
    const uint2 v = LdGlobal(reinterpret_cast<const uint2*>(p));
    const unsigned w[2] = {v.x, v.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (kDtype == MORI_EP_DTYPE_FP8_E4M3FN) {
        Fp8x2ToFloats(static_cast<unsigned short>(w[i] & 0xFFFF), f[4 * i], f[4 * i + 1]);
        Fp8x2ToFloats(static_cast<unsigned short>(w[i] >> 16), f[4 * i + 2], f[4 * i + 3]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) f[4 * i + j] = Fp8E4m3FnuzToFloat(w[i] >> (8 * j));
      }
    }
  } else if constexpr (kDtype == MORI_EP_DTYPE_FP32) {
    const uint4 lo = LdGlobal(reinterpret_cast<const uint4*>(p));
    const uint4 hi = LdGlobal(reinterpret_cast<const uint4*>(p) + 1);
    const unsigned w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = __uint_as_float(w[i]);
  } else {
    const uint4 v = LdGlobal(reinterpret_cast<const uint4*>(p));
    const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = Decode(static_cast<unsigned short>(w[i] & 0xFFFF));
      f[2 * i + 1] = Decode(static_cast<unsigned short>(w[i] >> 16));
    }
  }
}

__device__ __forceinline__ void StoreRow8(char* p, const float (&f)[kGroup]) {
  if constexpr (kFp8Rows) {
    unsigned w[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      if constexpr (kDtype == MORI_EP_DTYPE_FP8_E4M3FN) {
        w[i] = FloatsToFp8x2(f[4 * i], f[4 * i + 1]) |
               (static_cast<unsigned>(FloatsToFp8x2(f[4 * i + 2], f[4 * i + 3])) << 16);
      } else {
        w[i] = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) w[i] |= static_cast<unsigned>(FloatToFp8E4m3Fnuz(f[4 * i + j])) << (8 * j);
      }
    }
    StGlobal(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
  } else if constexpr (kDtype == MORI_EP_DTYPE_FP32) {
    StGlobal(reinterpret_cast<uint4*>(p), make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]),
                                                      __float_as_uint(f[2]), __float_as_uint(f[3])));
    StGlobal(reinterpret_cast<uint4*>(p) + 1, make_uint4(__float_as_uint(f[4]), __float_as_uint(f[5]),
                                                          __float_as_uint(f[6]), __float_as_uint(f[7])));
  } else {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = Encode(f[2 * i]) | (static_cast<unsigned>(Encode(f[2 * i + 1])) << 16);
    StGlobal(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
}

// Eight wire elements (fp8 formats: already multiplied by `scale`) added into acc.
__device__ __forceinline__ void AccumulateWire8(const char* p, float scale, float (&acc)[kGroup]) {
  if constexpr (kQuant == MORI_EP_QUANT_NONE) {
    float f[kGroup];
    LoadRow8(p, f);
#pragma unroll
    for (int i = 0; i < kGroup; ++i) acc[i] += f[i];
  } else if constexpr (kFp4Wire) {
    const unsigned word = LdGlobal(reinterpret_cast<const unsigned*>(p));
#pragma unroll
    for (int i = 0; i < kGroup; ++i) acc[i] += E2m1ToFloat(word >> (4 * i)) * scale;
  } else {
    const uint2 v = LdGlobal(reinterpret_cast<const uint2*>(p));
    const unsigned w[2] = {v.x, v.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float a, b, c, d;
      Fp8x2ToFloats(static_cast<unsigned short>(w[i] & 0xFFFF), a, b);
      Fp8x2ToFloats(static_cast<unsigned short>(w[i] >> 16), c, d);
      acc[4 * i] += a * scale;
      acc[4 * i + 1] += b * scale;
      acc[4 * i + 2] += c * scale;
      acc[4 * i + 3] += d * scale;
    }
  }
}

// x / divisor for the values of one block, equal to the IEEE division (what the cpu backend and
// the reference compute) at a fraction of its cost: the division's own sequence (a reciprocal,
// then one fma correction: Markstein's theorem makes it correctly rounded) with the correctly
// rounded reciprocal taken once per block instead of once per value, and one check per eight
// values instead of a range check and slow-path branch per value. The check sends the eight to
// the division itself when an intermediate could underflow or overflow (a divisor outside
// 2^+-90, a value below 2^-90 or a quotient below 2^-20). Checked against the division on 7.3e9
// pairs when written.
struct BlockDivisor {
  float divisor, reciprocal;
  bool in_range;
  __device__ __forceinline__ explicit BlockDivisor(float d)
      : divisor(d), reciprocal(__frcp_rn(d)), in_range(d >= 0x1p-90f && d <= 0x1p90f) {}
  __device__ __forceinline__ void Divide8(const float (&x)[kGroup], float (&q)[kGroup]) const {
    bool fast = in_range;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const float q0 = x[i] * reciprocal;
      q[i] = fmaf(fmaf(-q0, divisor, x[i]), reciprocal, q0);
      fast = fast && fabsf(q[i]) >= 0x1p-20f && fabsf(x[i]) >= 0x1p-90f;
    }
    if (!fast) {
#pragma unroll
      for (int i = 0; i < kGroup; ++i) q[i] = x[i] / divisor;
    }
  }
};

// Eight quotients (values / their block's scale; the values themselves for the direct cast) on
// the wire: e4m3fn, clamped to +-448 first (saturation is the format's contract here,
// src/cpu/convert.hpp does the same, not a property of one conversion instruction), or e2m1 for
// fp4.
__device__ __forceinline__ void StoreWire8(char* p, const float (&q)[kGroup]) {
  if constexpr (kFp4Wire) {
    StGlobal(reinterpret_cast<unsigned*>(p), PackE2m1x8(q));
    return;
  }
  float c[kGroup];
#pragma unroll
  for (int i = 0; i < kGroup; ++i) c[i] = fminf(fmaxf(q[i], -448.0f), 448.0f);
  unsigned w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    w[i] = FloatsToFp8x2(c[4 * i], c[4 * i + 1]) | (static_cast<unsigned>(FloatsToFp8x2(c[4 * i + 2], c[4 * i + 3])) << 16);
  }
  StGlobal(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
}

__device__ __forceinline__ float BlockScale(float amax) {
  return kFp4Wire ? Fp4BlockScale(amax) : (amax > 448.0f ? amax / 448.0f : 1.0f);
}

// Blocks of a power-of-two number of groups, at most 32: each warp step covers 32 groups, so
// 32 / block_groups whole blocks, with each block's amax reduced among its own lanes and its
// values kept in registers for the store. Walking the blocks one after another instead cost two
// dependent loads per block (about 110 per 7168-wide row): the fp4_blockwise combine of 4096
// tokens took 15 ms on the H100 against 1.2 ms for bf16, nearly all of it here.
// kSteps warp steps are loaded before any is reduced, to keep that many loads in flight
// (MORI_EP_STAGE_STEPS, 2 unless MORI_JIT_EXTRA_FLAGS defines it: the A/B of
// docs/benchmarks/ep.md, "The blockwise combine's staging", measures 4 against 2 on a GPU).
__device__ __forceinline__ void StageBlocksInLanes(const char* src, char* dst, float* scales, int groups,
                                                   int block_groups, int lane) {
  constexpr int kSteps = MORI_EP_STAGE_STEPS;
  const int block_shift = __ffs(block_groups) - 1;  // a power of two: no integer division per step
  for (int base = 0; base < groups; base += 32 * kSteps) {
    float f[kSteps][kGroup];
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int g = base + 32 * s + lane;
      if (g < groups) {
        LoadRow8(src + g * kGroup * kElemBytes, f[s]);
      } else {
#pragma unroll
        for (int i = 0; i < kGroup; ++i) f[s][i] = 0.0f;
      }
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int g = base + 32 * s + lane;
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kGroup; ++i) amax = fmaxf(amax, fabsf(f[s][i]));
      // Every lane shuffles (a partial last step included): a block's lanes are aligned and all
      // live or all past the blocked groups, which are a whole number of blocks.
      for (int offset = block_groups / 2; offset > 0; offset >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
      }
      if (g < groups) {
        const float scale = BlockScale(amax);
        if ((lane & (block_groups - 1)) == 0) scales[g >> block_shift] = scale;
        float q[kGroup];
        BlockDivisor(scale).Divide8(f[s], q);
        StoreWire8(dst + g * kWireGroupBytes, q);
      }
    }
  }
}

// One received row of the external input into the registered buffer, by one warp.
__device__ void StageRow(const mori_ep_args_t& a, int row, int lane) {
  const char* src = reinterpret_cast<const char*>(a.input) + static_cast<unsigned long long>(row) * a.row_bytes;
  char* dst = At<char>(a.region, a.off_comb_tokens + static_cast<unsigned long long>(row) * a.wire_row_bytes);
  const int groups = a.hidden / kGroup;
  if constexpr (kQuant == MORI_EP_QUANT_NONE) {
    for (int v = lane; v < a.row_bytes / 16; v += 32) {
      StGlobal(reinterpret_cast<uint4*>(dst) + v, LdGlobal(reinterpret_cast<const uint4*>(src) + v));
    }
  } else if constexpr (kQuant == MORI_EP_QUANT_FP8_DIRECT_CAST) {
    for (int g = lane; g < groups; g += 32) {
      float f[kGroup];
      LoadRow8(src + g * kGroup * kElemBytes, f);
      StoreWire8(dst + g * kGroup, f);
    }
  } else {
    // Blockwise: fp8 blocks whose magnitude fits fp8 travel unscaled (scale 1), larger ones are
    // scaled into range by amax / 448; fp4 blocks are all scaled by amax / 6 (e2m1 has too few
    // values to leave any unscaled).
    const int block_groups = groups / a.quant_blocks;
    float* scales = At<float>(a.region, a.off_comb_scales + static_cast<unsigned long long>(row) * a.quant_blocks * 4);
    if (block_groups <= 32 && (block_groups & (block_groups - 1)) == 0) {
      StageBlocksInLanes(src, dst, scales, a.quant_blocks * block_groups, block_groups, lane);
      return;
    }
    // Blocks wider than a warp step: a warp walks the blocks one after another.
    for (int b = 0; b < a.quant_blocks; ++b) {
      float amax = 0.0f;
      for (int g = b * block_groups + lane; g < (b + 1) * block_groups; g += 32) {
        float f[kGroup];
        LoadRow8(src + g * kGroup * kElemBytes, f);
#pragma unroll
        for (int i = 0; i < kGroup; ++i) amax = fmaxf(amax, fabsf(f[i]));
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) amax = fmaxf(amax, __shfl_xor_sync(kFullMask, amax, offset));
      const float scale = BlockScale(amax);
      if (lane == 0) scales[b] = scale;
      const BlockDivisor divide(scale);
      for (int g = b * block_groups + lane; g < (b + 1) * block_groups; g += 32) {
        float f[kGroup];
        LoadRow8(src + g * kGroup * kElemBytes, f);
        float q[kGroup];
        divide.Divide8(f, q);
        StoreWire8(dst + g * kWireGroupBytes, q);
      }
    }
  }
}

}  // namespace mori::ep

using namespace mori::ep;

extern "C" __global__ void mori_ep_combine_stage(const __grid_constant__ mori_ep_args_t a) {
  const auto [lane, warp, warps] = ThisWarp();
  MORI_EP_VIZ_INIT(viz, reinterpret_cast<void*>(a.trace_buf));
  MORI_VIZ_BEGIN(viz, MORI_EP_SLOT_COMBINE_STAGE);
  int total = *At<int>(a.region, MORI_EP_CTRL_TOTAL_RECV);
  if ((a.flags & MORI_EP_EXTERNAL_INPUT) && total > a.input_rows) {
    if (blockIdx.x == 0 && threadIdx.x == 0) RecordError(a, MORI_EP_ERR_SHORT_INPUT);
    total = a.input_rows;  // never read past the caller's tensor
  }
  if (a.flags & MORI_EP_EXTERNAL_INPUT) {
    for (int row = warp; row < total; row += warps) StageRow(a, row, lane);
  }
  if (a.flags & MORI_EP_HAS_WEIGHTS) {
    const float* src = reinterpret_cast<const float*>(a.weights);
    float* dst = At<float>(a.region, a.off_comb_weights);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total * kTopk; i += gridDim.x * blockDim.x) dst[i] = src[i];
  }
  MORI_VIZ_END(viz, MORI_EP_SLOT_COMBINE_STAGE);
  if (!LastBlock(a, MORI_EP_CTRL_COMBINE_ARRIVE)) return;
  MORI_VIZ_BEGIN(viz, MORI_EP_SLOT_COMBINE_BARRIER);
  const unsigned long long* peers = reinterpret_cast<const unsigned long long*>(a.peer_regions);
  unsigned long long* calls = At<unsigned long long>(a.region, MORI_EP_CTRL_COMBINE_CALLS);
  const unsigned long long epoch = *calls + 1;
  const int end = a.local_first + a.local_count;
  for (int pe = a.local_first + threadIdx.x; pe < end; pe += blockDim.x) {
    atomicAdd_system(At<unsigned long long>(peers[pe], MORI_EP_CTRL_BARRIER) + a.rank, 1ull);
  }
  for (int pe = a.local_first + threadIdx.x; pe < end; pe += blockDim.x) {
    WaitFor(a, At<unsigned long long>(a.region, MORI_EP_CTRL_BARRIER) + pe,
            [epoch](unsigned long long v) { return v >= epoch; });
  }
  __syncthreads();
  if (threadIdx.x == 0) *calls = epoch;
  MORI_VIZ_END(viz, MORI_EP_SLOT_COMBINE_BARRIER);
}

extern "C" __global__ void mori_ep_combine(const __grid_constant__ mori_ep_args_t a) {
  __shared__ unsigned long long peers[kWorld];
  for (int pe = threadIdx.x; pe < kWorld; pe += blockDim.x) {
    peers[pe] = reinterpret_cast<const unsigned long long*>(a.peer_regions)[pe];
  }
  __syncthreads();
  const auto [lane, warp, warps] = ThisWarp();
  const int groups = a.hidden / kGroup;
  // Few tokens: split each row over several warps so the whole grid keeps loads in flight.
  const int parts = max(1, min(warps / max(a.num_tokens, 1), groups / 32));
  const int per_part = (groups + parts - 1) / parts;
  const bool weighted = (a.flags & MORI_EP_HAS_WEIGHTS) != 0;
  const int* dest_map = At<int>(a.region, MORI_EP_NET ? a.off_net_hop_map : a.off_dest_map);
  MORI_EP_VIZ_INIT(viz, reinterpret_cast<void*>(a.trace_buf));
  MORI_VIZ_BEGIN(viz, MORI_EP_SLOT_COMBINE_ACCUMULATE);

  for (int unit = warp; unit < a.num_tokens * parts; unit += warps) {
    const int token = unit / parts, part = unit % parts;
    if (MORI_EP_NET) {  // a hop row past its node's batch: nothing was forwarded for it
      const unsigned long long tag =
          *At<unsigned long long>(a.region, MORI_EP_CTRL_NET_HOP_SIGNAL + 8ull * (token / a.max_tokens));
      if (static_cast<unsigned>(token % a.max_tokens) >= static_cast<unsigned>(tag)) continue;
    }
    const int flat = lane < kTopk ? dest_map[token * kTopk + lane] : -1;
    const unsigned sending = __ballot_sync(kFullMask, flat >= 0);
    const int count = __popc(sending);
    unsigned long long mine = 0;
    int my_slot = 0;
    if (flat >= 0) {
      mine = peers[flat / a.max_recv];
      my_slot = flat % a.max_recv;
    }
    const char* rows[kTopk];
    const float* scales[kTopk];
    const float* weights[kTopk];
    unsigned rest = sending;
#pragma unroll
    for (int d = 0; d < kTopk; ++d) {
      const int src_lane = PopLowestLane(rest);
      const unsigned long long base = __shfl_sync(kFullMask, mine, src_lane);
      const unsigned long long slot = static_cast<unsigned long long>(__shfl_sync(kFullMask, my_slot, src_lane));
      rows[d] = At<char>(base, a.off_comb_tokens + slot * a.wire_row_bytes);
      scales[d] = At<float>(base, a.off_comb_scales + slot * a.quant_blocks * 4);
      weights[d] = At<float>(base, a.off_comb_weights + slot * kTopk * 4);
    }

    char* out = MORI_EP_NET ? At<char>(a.region, a.off_net_reply + static_cast<unsigned long long>(token) * a.reply_bytes)
                            : At<char>(a.region, a.off_comb_out + static_cast<unsigned long long>(token) * a.row_bytes);
    const int block_groups = kBlockwise ? groups / a.quant_blocks : 1;
    const int end = min(groups, (part + 1) * per_part);
    for (int g = part * per_part + lane; g < end; g += 32) {
      float acc[kGroup] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int d = 0; d < kTopk; ++d) {
        if (d >= count) break;
        const float scale = kBlockwise ? scales[d][g / block_groups] : 1.0f;
        AccumulateWire8(rows[d] + static_cast<unsigned long long>(g) * kWireGroupBytes, scale, acc);
      }
      StoreRow8(out + static_cast<unsigned long long>(g) * kGroup * kElemBytes, acc);
    }
    if (weighted && part == 0 && lane < kTopk) {
      float sum = 0.0f;
#pragma unroll
      for (int d = 0; d < kTopk; ++d) {
        if (d < count) sum += weights[d][lane];
      }
      float* out_weights = MORI_EP_NET ? reinterpret_cast<float*>(out + MORI_EP_REPLY_WEIGHTS(a))
                                       : At<float>(a.region, a.off_comb_out_weights) + token * kTopk;
      out_weights[lane] = sum;
    }
  }
  MORI_VIZ_END(viz, MORI_EP_SLOT_COMBINE_ACCUMULATE);
}

#if MORI_EP_NET
// Each token's output: the sum, in fp32, of the replies of the nodes its picks went to (they have
// all arrived: mori_ep_net_wait ran first).
extern "C" __global__ void mori_ep_net_sum(const __grid_constant__ mori_ep_args_t a) {
  const auto [lane, warp, warps] = ThisWarp();
  const int groups = a.hidden / kGroup;
  const bool weighted = (a.flags & MORI_EP_HAS_WEIGHTS) != 0;
  const int* dest_map = At<int>(a.region, a.off_dest_map);
  for (int token = warp; token < a.num_tokens; token += warps) {
    const int flat = lane < kTopk ? dest_map[token * kTopk + lane] : -1;
    const unsigned sending = __ballot_sync(kFullMask, flat >= 0);
    const int count = __popc(sending);
    const char* replies[kTopk];
    unsigned rest = sending;
#pragma unroll
    for (int d = 0; d < kTopk; ++d) {
      const int src_lane = PopLowestLane(rest);
      const unsigned long long f = static_cast<unsigned long long>(__shfl_sync(kFullMask, flat, src_lane));
      replies[d] = At<char>(a.region, a.off_net_reply_recv + f * a.reply_bytes);
    }
    char* out = At<char>(a.region, a.off_comb_out + static_cast<unsigned long long>(token) * a.row_bytes);
    for (int g = lane; g < groups; g += 32) {
      float acc[kGroup] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int d = 0; d < kTopk; ++d) {
        if (d >= count) break;
        float f[kGroup];
        LoadRow8(replies[d] + static_cast<unsigned long long>(g) * kGroup * kElemBytes, f);
#pragma unroll
        for (int i = 0; i < kGroup; ++i) acc[i] += f[i];
      }
      StoreRow8(out + static_cast<unsigned long long>(g) * kGroup * kElemBytes, acc);
    }
    if (weighted && lane < kTopk) {
      float sum = 0.0f;
#pragma unroll
      for (int d = 0; d < kTopk; ++d) {
        if (d < count) sum += reinterpret_cast<const float*>(replies[d] + MORI_EP_REPLY_WEIGHTS(a))[lane];
      }
      At<float>(a.region, a.off_comb_out_weights)[token * kTopk + lane] = sum;
    }
  }
}
#endif
