// SPDX-License-Identifier: MIT
#include "host/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "host/lsa_sync.hpp"
#include "host/numeric.hpp"

namespace mori::cco::host {

namespace {

constexpr uint64_t kChunk = 4096;  // elements reduced at a time: the accumulator stays in L1

// How a reduction reads and writes one dtype; Acc is the accumulator type (float for the
// floating types, the type itself for integers, so integer sums are exact).
template <int Dtype>
struct Elem;
// A type held and accumulated as itself.
template <typename T>
struct Plain {
  using Storage = T;
  using Acc = T;
  static Acc load(Storage v) { return v; }
  static Storage store(Acc v) { return v; }
};
template <>
struct Elem<MORI_CCO_DTYPE_FLOAT32> : Plain<float> {};
// A 16-bit float held as its bits and accumulated in float, through its two conversions.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
struct Float16Bits {
  using Storage = uint16_t;
  using Acc = float;
  static Acc load(Storage v) { return ToFloat(v); }
  static Storage store(Acc v) { return FromFloat(v); }
};
template <>
struct Elem<MORI_CCO_DTYPE_BFLOAT16> : Float16Bits<bf16_to_float, float_to_bf16> {};
template <>
struct Elem<MORI_CCO_DTYPE_FLOAT16> : Float16Bits<half_to_float, float_to_half> {};
template <>
struct Elem<MORI_CCO_DTYPE_INT32> : Plain<int32_t> {};
template <>
struct Elem<MORI_CCO_DTYPE_INT64> : Plain<int64_t> {};

template <int Op, typename Acc>
Acc combine(Acc a, Acc b) {
  if constexpr (Op == MORI_CCO_OP_MAX) {
    return std::max(a, b);
  } else if constexpr (Op == MORI_CCO_OP_MIN) {
    return std::min(a, b);
  } else if constexpr (std::is_integral_v<Acc>) {
    // Integer sums wrap like the GPU's (and torch's): do them in unsigned arithmetic.
    return static_cast<Acc>(static_cast<std::make_unsigned_t<Acc>>(a) + static_cast<std::make_unsigned_t<Acc>>(b));
  } else {
    return a + b;
  }
}

struct Buffers {
  explicit Buffers(const mori_cco_collective_args_t& call)
      : args(call),
        parity(*resource_word(call.comm, call.comm.lsa_rank, call.comm.barrier_epoch_offset + 8ull * call.barrier_base) &
               1u) {}
  uint8_t* of(int lsa_rank) const {
    return reinterpret_cast<uint8_t*>(args.comm.flat_base + static_cast<uint64_t>(lsa_rank) * args.comm.per_rank_size +
                                      args.scratch_offset + parity * args.scratch_half);
  }
  const mori_cco_collective_args_t& args;
  const uint64_t parity;  // read before the call's barrier advances the epoch
};

// Quantises n floats (read through load) into e4m3 codes + one scale per block at dst.
template <typename Load>
void quantize_fp8(uint64_t n, Load&& load, uint8_t* dst) {
  float* scales = reinterpret_cast<float*>(dst + mori_cco_fp8_scales_offset(n));
  for (uint64_t block = 0; block * MORI_CCO_FP8_BLOCK < n; ++block) {
    const uint64_t begin = block * MORI_CCO_FP8_BLOCK;
    const uint64_t end = std::min(n, begin + MORI_CCO_FP8_BLOCK);
    float amax = 0.0f;
    for (uint64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(load(i)));
    const float scale = amax > 0.0f ? amax / kFp8Max : 1.0f;
    scales[block] = scale;
    const float inverse = 1.0f / scale;  // as the GPU: one division per block, not per element
    for (uint64_t i = begin; i < end; ++i) dst[i] = float_to_fp8(load(i) * inverse);
  }
}

// Reduces elements [begin, end) of every LSA rank's staged buffer into out (output storage). The
// op and the wire are template parameters so that the inner loops have no branches and vectorise.
template <int Dtype, int Op, bool Fp8>
void reduce_range(const mori_cco_collective_args_t& args, const Buffers& buffers, uint64_t begin, uint64_t end,
                  typename Elem<Dtype>::Storage* out) {
  using E = Elem<Dtype>;
  using Acc = typename E::Acc;
  const int world = args.comm.lsa_size;
  std::vector<Acc> acc(kChunk);
  for (uint64_t chunk = begin; chunk < end; chunk += kChunk) {
    const uint64_t len = std::min(kChunk, end - chunk);
    for (int peer = 0; peer < world; ++peer) {
      const uint8_t* staged = buffers.of(peer);
      auto value = [&](uint64_t e) -> Acc {
        if constexpr (Fp8) {
          const float* scales = reinterpret_cast<const float*>(staged + mori_cco_fp8_scales_offset(args.count));
          return static_cast<Acc>(fp8_to_float(staged[e]) * scales[e / MORI_CCO_FP8_BLOCK]);
        } else {
          return E::load(reinterpret_cast<const typename E::Storage*>(staged)[e]);
        }
      };
      if (peer == 0) {
        for (uint64_t i = 0; i < len; ++i) acc[i] = value(chunk + i);
      } else {
        for (uint64_t i = 0; i < len; ++i) acc[i] = combine<Op, Acc>(acc[i], value(chunk + i));
      }
    }
    for (uint64_t i = 0; i < len; ++i) out[chunk - begin + i] = E::store(acc[i]);
  }
}

// reduce_range for the call's op and wire.
template <int Dtype>
void reduce(const mori_cco_collective_args_t& args, const Buffers& buffers, uint64_t begin, uint64_t end,
            typename Elem<Dtype>::Storage* out) {
  const bool fp8 = args.wire == MORI_CCO_WIRE_FP8;
  if constexpr (std::is_integral_v<typename Elem<Dtype>::Acc>) {
    if (fp8) fail(ccoInvalidArgument, "the fp8 wire needs a floating dtype, got dtype code ", Dtype);
  }
  switch (args.op) {
    case MORI_CCO_OP_MAX:
      return fp8 ? reduce_range<Dtype, MORI_CCO_OP_MAX, true>(args, buffers, begin, end, out)
                 : reduce_range<Dtype, MORI_CCO_OP_MAX, false>(args, buffers, begin, end, out);
    case MORI_CCO_OP_MIN:
      return fp8 ? reduce_range<Dtype, MORI_CCO_OP_MIN, true>(args, buffers, begin, end, out)
                 : reduce_range<Dtype, MORI_CCO_OP_MIN, false>(args, buffers, begin, end, out);
    default:
      return fp8 ? reduce_range<Dtype, MORI_CCO_OP_SUM, true>(args, buffers, begin, end, out)
                 : reduce_range<Dtype, MORI_CCO_OP_SUM, false>(args, buffers, begin, end, out);
  }
}

template <int Dtype>
void all_reduce(const mori_cco_collective_args_t& args) {
  using E = Elem<Dtype>;
  using Storage = typename E::Storage;
  const Buffers buffers(args);
  const uint64_t n = args.count;
  const auto* input = reinterpret_cast<const Storage*>(args.input);
  auto* output = reinterpret_cast<Storage*>(args.output);
  uint8_t* own = buffers.of(args.comm.lsa_rank);
  if (args.wire == MORI_CCO_WIRE_FP8) {
    quantize_fp8(n, [&](uint64_t i) { return static_cast<float>(E::load(input[i])); }, own);
  } else {
    std::memcpy(own, input, n * sizeof(Storage));
  }
  lsa_barrier(args.comm, args.barrier_base);
  if (args.kind == MORI_CCO_ALL_REDUCE_ONE_SHOT) {
    reduce<Dtype>(args, buffers, 0, n, output);
    return;
  }
  const int world = args.comm.lsa_size;
  const uint64_t slice = mori_cco_slice_len(n, world);
  const uint64_t reduced = mori_cco_staged_bytes(n, sizeof(Storage), args.wire);
  const uint64_t mine = std::min(n, slice * args.comm.lsa_rank);
  reduce<Dtype>(args, buffers, mine, std::min(n, mine + slice), reinterpret_cast<Storage*>(own + reduced) + mine);
  lsa_barrier(args.comm, args.barrier_base + 1);
  for (int peer = 0; peer < world; ++peer) {
    const uint64_t begin = std::min(n, slice * peer);
    const uint64_t end = std::min(n, begin + slice);
    std::memcpy(output + begin, reinterpret_cast<const Storage*>(buffers.of(peer) + reduced) + begin,
                (end - begin) * sizeof(Storage));
  }
}

void gather_bytes(const mori_cco_collective_args_t& args) {
  const Buffers buffers(args);
  const int world = args.comm.lsa_size;
  const uint64_t staged = args.kind == MORI_CCO_ALL_TO_ALL ? args.count * world : args.count;
  std::memcpy(buffers.of(args.comm.lsa_rank), reinterpret_cast<const void*>(args.input), staged);
  lsa_barrier(args.comm, args.barrier_base);
  auto* out = reinterpret_cast<uint8_t*>(args.output);
  for (int peer = 0; peer < world; ++peer) {
    const uint64_t from = args.kind == MORI_CCO_ALL_TO_ALL ? args.count * args.comm.lsa_rank : 0;
    std::memcpy(out + args.count * peer, buffers.of(peer) + from, args.count);
  }
}

}  // namespace

void run_collective(const mori_cco_collective_args_t& args) {
  if (args.kind == MORI_CCO_ALL_GATHER || args.kind == MORI_CCO_ALL_TO_ALL) {
    gather_bytes(args);
    return;
  }
  switch (args.dtype) {
    case MORI_CCO_DTYPE_FLOAT32:
      return all_reduce<MORI_CCO_DTYPE_FLOAT32>(args);
    case MORI_CCO_DTYPE_BFLOAT16:
      return all_reduce<MORI_CCO_DTYPE_BFLOAT16>(args);
    case MORI_CCO_DTYPE_FLOAT16:
      return all_reduce<MORI_CCO_DTYPE_FLOAT16>(args);
    case MORI_CCO_DTYPE_INT32:
      return all_reduce<MORI_CCO_DTYPE_INT32>(args);
    case MORI_CCO_DTYPE_INT64:
      return all_reduce<MORI_CCO_DTYPE_INT64>(args);
    default:
      fail(ccoInvalidArgument, "dtype code ", args.dtype, " is not a reduction type");
  }
}

}  // namespace mori::cco::host
