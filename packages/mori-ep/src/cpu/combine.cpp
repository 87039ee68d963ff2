// SPDX-License-Identifier: MIT
// Combine on the cpu backend, as the kernels do it:
//   1. stage: with an external input, copy the received rows' expert outputs (cast to fp8, with
//      per-block scales for the blockwise format) and their weights into the registered buffer;
//   2. barrier: tell every PE our buffer is ready (add 1 to our slot in theirs) and wait until
//      every PE has done so for this call (the per-PE count of completed combines is the epoch);
//   3. pull: each local token sums, in fp32 and in top-k order, the rows its destinations hold
//      for it, and the weights likewise.
// The barrier spans the PEs [local_first, +local_count); the inter-node types (net.cpp) pull their
// node's rows the same way into replies, then move the replies across nodes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "convert.hpp"
#include "ep_cpu.hpp"
#include "fp4.hpp"
#include "region.hpp"
#include "sync.hpp"

namespace mori::ep::cpu {

namespace {

float Load(const char* row, int i, int dtype) {
  switch (dtype) {
    case MORI_EP_DTYPE_BF16:
      return Bf16ToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
    case MORI_EP_DTYPE_FP16:
      return Fp16ToFloat(reinterpret_cast<const uint16_t*>(row)[i]);
    case MORI_EP_DTYPE_FP8_E4M3FN:
      return Fp8E4m3ToFloat(reinterpret_cast<const uint8_t*>(row)[i]);
    case MORI_EP_DTYPE_FP8_E4M3FNUZ:
      return Fp8E4m3FnuzToFloat(reinterpret_cast<const uint8_t*>(row)[i]);
    default:
      return reinterpret_cast<const float*>(row)[i];
  }
}

void Store(char* row, int i, int dtype, float v) {
  switch (dtype) {
    case MORI_EP_DTYPE_BF16:
      reinterpret_cast<uint16_t*>(row)[i] = FloatToBf16(v);
      break;
    case MORI_EP_DTYPE_FP16:
      reinterpret_cast<uint16_t*>(row)[i] = FloatToFp16(v);
      break;
    case MORI_EP_DTYPE_FP8_E4M3FN:
      reinterpret_cast<uint8_t*>(row)[i] = FloatToFp8E4m3(v);
      break;
    case MORI_EP_DTYPE_FP8_E4M3FNUZ:
      reinterpret_cast<uint8_t*>(row)[i] = FloatToFp8E4m3Fnuz(v);
      break;
    default:
      reinterpret_cast<float*>(row)[i] = v;
  }
}

// One received row into the registered buffer, in the wire format of `quant`.
void StageRow(const mori_ep_args_t& a, const char* src, char* dst, float* scales, int dtype, int quant) {
  if (quant == MORI_EP_QUANT_NONE) {
    std::memcpy(dst, src, a.row_bytes);
    return;
  }
  uint8_t* out = reinterpret_cast<uint8_t*>(dst);
  if (quant == MORI_EP_QUANT_FP4_BLOCKWISE) {
    std::vector<float> row(a.hidden);
    for (int i = 0; i < a.hidden; ++i) row[i] = Load(src, i, dtype);
    QuantizeFp4Blockwise(row.data(), a.hidden, a.quant_blocks, out, scales);
    return;
  }
  if (quant == MORI_EP_QUANT_FP8_DIRECT_CAST) {
    for (int i = 0; i < a.hidden; ++i) out[i] = FloatToFp8E4m3(Load(src, i, dtype));
    return;
  }
  // Blockwise: a block whose magnitude fits fp8 travels unscaled (scale 1), so the common case
  // loses nothing to a division; larger blocks are scaled into range by amax / 448.
  const int block = a.hidden / a.quant_blocks;
  for (int b = 0; b < a.quant_blocks; ++b) {
    float amax = 0.0f;
    for (int i = b * block; i < (b + 1) * block; ++i) amax = std::max(amax, std::fabs(Load(src, i, dtype)));
    const float scale = amax > kFp8E4m3Max ? amax / kFp8E4m3Max : 1.0f;
    scales[b] = scale;
    for (int i = b * block; i < (b + 1) * block; ++i) out[i] = FloatToFp8E4m3(Load(src, i, dtype) / scale);
  }
}

void Stage(const mori_ep_args_t& a, int dtype, int quant) {
  const Region local = Local(a);
  int total = *local.TotalRecv();
  const int K = a.topk;
  if ((a.flags & MORI_EP_EXTERNAL_INPUT) && total > a.input_rows) {
    RecordError(a, MORI_EP_ERR_SHORT_INPUT);
    total = a.input_rows;  // never read past the caller's tensor
  }
  for (int r = 0; r < total; ++r) {
    if (a.flags & MORI_EP_EXTERNAL_INPUT) {
      StageRow(a, reinterpret_cast<const char*>(a.input) + static_cast<size_t>(r) * a.row_bytes,
               local.At<char>(a.off_comb_tokens) + static_cast<size_t>(r) * a.wire_row_bytes,
               local.At<float>(a.off_comb_scales) + static_cast<size_t>(r) * a.quant_blocks, dtype, quant);
    }
    if (a.flags & MORI_EP_HAS_WEIGHTS) {
      std::memcpy(local.At<float>(a.off_comb_weights) + static_cast<size_t>(r) * K,
                  reinterpret_cast<const float*>(a.weights) + static_cast<size_t>(r) * K, K * sizeof(float));
    }
  }
}

}  // namespace

void CombineStageAndBarrier(const mori_ep_args_t& a, int dtype, int quant) {
  Stage(a, dtype, quant);
  const Region local = Local(a);
  const uint64_t epoch = *local.CombineCalls() + 1;
  const int first = a.local_first, end = a.local_first + a.local_count;
  for (int pe = first; pe < end; ++pe) FetchAdd(Peer(a, pe).Barrier(a.rank), uint64_t{1});
  for (int pe = first; pe < end; ++pe) {
    WaitFor(local.Barrier(pe), [epoch](uint64_t v) { return v >= epoch; }, a.spin_timeout_ns,
            "combine: PE " + std::to_string(pe) + " did not reach the combine barrier");
  }
  *local.CombineCalls() = epoch;
}

namespace {

float Decode(const mori_ep_args_t& a, const Region& peer, int slot, int i, int dtype, int quant) {
  const char* row = peer.At<char>(a.off_comb_tokens) + static_cast<size_t>(slot) * a.wire_row_bytes;
  if (quant == MORI_EP_QUANT_NONE) return Load(row, i, dtype);
  if (quant == MORI_EP_QUANT_FP4_BLOCKWISE) {
    const float* scales = peer.At<float>(a.off_comb_scales) + static_cast<size_t>(slot) * a.quant_blocks;
    return DequantizeFp4Blockwise(reinterpret_cast<const uint8_t*>(row), scales, a.hidden, a.quant_blocks, i);
  }
  const float v = Fp8E4m3ToFloat(reinterpret_cast<const uint8_t*>(row)[i]);
  if (quant == MORI_EP_QUANT_FP8_DIRECT_CAST) return v;
  const int block = a.hidden / a.quant_blocks;
  return v * peer.At<float>(a.off_comb_scales)[static_cast<size_t>(slot) * a.quant_blocks + i / block];
}

}  // namespace

void Pull(const mori_ep_args_t& a, int dtype, int quant, const PullTarget& target) {
  const int K = a.topk;
  std::vector<float> acc(a.hidden), weights(K);
  for (int t = 0; t < target.rows; ++t) {
    if (target.valid && !target.valid(t)) continue;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(weights.begin(), weights.end(), 0.0f);
    for (int k = 0; k < K; ++k) {
      const int flat = target.dest_map[t * K + k];
      if (flat < 0) continue;
      const Region peer = Peer(a, flat / a.max_recv);
      const int slot = flat % a.max_recv;
      for (int i = 0; i < a.hidden; ++i) acc[i] += Decode(a, peer, slot, i, dtype, quant);
      if (a.flags & MORI_EP_HAS_WEIGHTS) {
        const float* w = peer.At<float>(a.off_comb_weights) + static_cast<size_t>(slot) * K;
        for (int j = 0; j < K; ++j) weights[j] += w[j];
      }
    }
    char* out = target.out + static_cast<size_t>(t) * target.out_stride;
    for (int i = 0; i < a.hidden; ++i) Store(out, i, dtype, acc[i]);
    if (a.flags & MORI_EP_HAS_WEIGHTS) {
      std::memcpy(target.weights + static_cast<size_t>(t) * target.weights_stride, weights.data(), K * sizeof(float));
    }
  }
}

float LoadElement(const char* row, int i, int dtype) { return Load(row, i, dtype); }
void StoreElement(char* row, int i, int dtype, float v) { Store(row, i, dtype, v); }

void Combine(const mori_ep_args_t& a, int dtype, int quant) {
  CombineStageAndBarrier(a, dtype, quant);
  const Region local = Local(a);
  PullTarget target;
  target.dest_map = local.At<int>(a.off_dest_map);
  target.rows = a.num_tokens;
  target.out = local.At<char>(a.off_comb_out);
  target.out_stride = a.row_bytes;
  target.weights = local.At<char>(a.off_comb_out_weights);
  target.weights_stride = static_cast<size_t>(a.topk) * sizeof(float);
  Pull(a, dtype, quant, target);
}

}  // namespace mori::ep::cpu
