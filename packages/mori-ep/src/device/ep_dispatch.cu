// SPDX-License-Identifier: MIT
// Intra-host dispatch: every PE pushes its tokens straight into the receive buffers of the PEs
// that own their experts (P2P stores through the symmetric heap), with no host step in between,
// so it runs under CUDA graph capture. The protocol is src/cpu/dispatch.cpp's:
//   route     a warp per token; lane k looks at pick k; the first lane naming a PE sends the token
//             there, later lanes naming the same PE are duplicates (a token lands once per PE);
//   reserve   normal: the block counts its rows per destination, then one remote fetch-add per
//             (block, destination) claims a run of rows, handed out by shared-memory atomics;
//             low latency (MORI_EP_LL): one remote fetch-add per row, no second pass;
//   write     the token (read once, stored to every destination), its full top-k ids and
//             weights, its scales and its source position;
//   complete  the last block to finish signals every PE with (rows sent + 1), waits for every
//             PE's signal, publishes the total and resets the receive state for the next call.
// With MORI_EP_REPLAY in flags the slots come from the dest map (a routing handle's, copied there by
// the host; a proxy's forward map with MORI_EP_NET) and nothing is reserved: every PE replays the
// same earlier dispatch.
// Steps reserve..complete span the PEs [local_first, +local_count) (all of them intra-node).
// With MORI_EP_NET the kernel is an inter-node proxy's forward (src/cpu/net.cpp): its rows are the
// records of the hop buffer (mori_ep_net_wait saw every node's batch arrive); picks of PEs outside
// the range are left to the other nodes; at the end every source is told its batch was taken.
// Compile-time constants: MORI_EP_WORLD (PEs), MORI_EP_TOPK (picks per token), MORI_EP_LL, MORI_EP_NET.
#include "ep_kernel.cuh"
#include "ep_slots.h"

#ifndef MORI_EP_NET
#define MORI_EP_NET 0
#endif
#if MORI_EP_NET
#include "mori_shmem/mori_shmem_device.cuh"
#endif

#ifndef MORI_EP_LL
#define MORI_EP_LL 0
#endif

namespace mori::ep {

constexpr int kUnroll = 4;  // 16-byte vectors in flight per lane

static_assert(kWorld >= 1 && kWorld <= MORI_EP_MAX_WORLD_SIZE, "world size out of range");
static_assert(kTopk >= 1 && kTopk <= MORI_EP_MAX_TOPK, "top-k out of range");

// The rows of a launch: the caller's tensors, or (MORI_EP_NET) the hop buffer's records.
__device__ __forceinline__ const char* Record(const mori_ep_args_t& a, int row) {
  return At<char>(a.region, a.off_net_hop + static_cast<unsigned long long>(row) * a.record_bytes);
}
__device__ __forceinline__ bool RowValid(const mori_ep_args_t& a, int row) {
  if (!MORI_EP_NET) return true;
  const unsigned long long tag = *At<unsigned long long>(a.region, MORI_EP_CTRL_NET_HOP_SIGNAL + 8ull * (row / a.max_tokens));
  return static_cast<unsigned>(row % a.max_tokens) < static_cast<unsigned>(tag);
}
__device__ __forceinline__ const char* RowToken(const mori_ep_args_t& a, int row) {
  if (MORI_EP_NET) return Record(a, row);
  return reinterpret_cast<const char*>(a.input) + static_cast<unsigned long long>(row) * a.row_bytes;
}
__device__ __forceinline__ const int* RowIndices(const mori_ep_args_t& a, int row) {
  if (MORI_EP_NET) return reinterpret_cast<const int*>(Record(a, row) + MORI_EP_RECORD_INDICES(a));
  return reinterpret_cast<const int*>(a.indices) + static_cast<unsigned long long>(row) * kTopk;
}
__device__ __forceinline__ const float* RowWeights(const mori_ep_args_t& a, int row) {
  if (MORI_EP_NET) return reinterpret_cast<const float*>(Record(a, row) + MORI_EP_RECORD_WEIGHTS(a));
  return reinterpret_cast<const float*>(a.weights) + static_cast<unsigned long long>(row) * kTopk;
}
__device__ __forceinline__ const unsigned* RowScales(const mori_ep_args_t& a, int row) {
  if (MORI_EP_NET) return reinterpret_cast<const unsigned*>(Record(a, row) + MORI_EP_RECORD_SCALES(a));
  return reinterpret_cast<const unsigned*>(a.scales + static_cast<unsigned long long>(row) * a.scale_bytes);
}
__device__ __forceinline__ int RowSrcPos(const mori_ep_args_t& a, int row) {
  if (MORI_EP_NET) return *reinterpret_cast<const int*>(Record(a, row) + MORI_EP_RECORD_SRC_POS(a));
  return a.rank * kWorld * a.max_tokens + row;
}
__device__ __forceinline__ int* DestMap(const mori_ep_args_t& a) {
  return At<int>(a.region, MORI_EP_NET ? a.off_net_hop_map : a.off_dest_map);
}

// This lane's destination PE if it is the first pick of that PE among the local ones, else -1.
__device__ __forceinline__ int Route(const mori_ep_args_t& a, int token, int lane) {
  int pe = -1;
  if (lane < kTopk && RowValid(a, token)) {
    const int expert = RowIndices(a, token)[lane];
    if (expert >= a.experts_per_rank * kWorld) {
      RecordError(a, MORI_EP_ERR_BAD_EXPERT);
    } else if (expert >= 0) {
      pe = expert / a.experts_per_rank;
      if (pe < a.local_first || pe >= a.local_first + a.local_count) pe = -1;
    }
  }
  const unsigned same = __match_any_sync(kFullMask, pe);
  return (pe >= 0 && __ffs(same) - 1 == lane) ? pe : -1;
}

// Writes token `token` into `slot` of each PE whose lane holds slot >= 0 (pe/slot per lane).
__device__ __forceinline__ void WriteRows(const mori_ep_args_t& a, const unsigned long long* peers, int token,
                                          int lane, int pe, int slot) {
  const unsigned sending = __ballot_sync(kFullMask, slot >= 0);
  const int count = __popc(sending);
  if (lane < kTopk) DestMap(a)[token * kTopk + lane] = slot >= 0 ? pe * a.max_recv + slot : -1;
  if (count == 0) return;

  unsigned long long row[kTopk];  // each destination's region base + slot, in lane order
  int slots[kTopk];
  unsigned rest = sending;
#pragma unroll
  for (int d = 0; d < kTopk; ++d) {
    const int src_lane = PopLowestLane(rest);
    const int p = __shfl_sync(kFullMask, pe, src_lane);
    slots[d] = __shfl_sync(kFullMask, slot, src_lane);
    row[d] = d < count ? peers[p] : 0;
  }

  const int vectors = a.row_bytes / 16;
  const uint4* src = reinterpret_cast<const uint4*>(RowToken(a, token));
  for (int c = lane; c < vectors; c += 32 * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (c + 32 * u < vectors) v[u] = LdGlobal(src + c + 32 * u);
    }
#pragma unroll
    for (int d = 0; d < kTopk; ++d) {
      if (d >= count) break;
      uint4* dst = At<uint4>(row[d], a.off_disp_tokens + static_cast<unsigned long long>(slots[d]) * a.row_bytes);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (c + 32 * u < vectors) StGlobal(dst + c + 32 * u, v[u]);
      }
    }
  }

  const int index = lane < kTopk ? RowIndices(a, token)[lane] : 0;
  const bool weighted = (a.flags & MORI_EP_HAS_WEIGHTS) != 0;
  const float weight = (weighted && lane < kTopk) ? RowWeights(a, token)[lane] : 0.0f;
  const int scale_words = (a.flags & MORI_EP_HAS_SCALES) ? a.scale_bytes / 4 : 0;
  const unsigned* scales = RowScales(a, token);
  const int src_pos = RowSrcPos(a, token);
#pragma unroll
  for (int d = 0; d < kTopk; ++d) {
    if (d >= count) break;
    const unsigned long long r = row[d];
    const unsigned long long s = static_cast<unsigned long long>(slots[d]);
    if (lane < kTopk) {
      At<int>(r, a.off_disp_indices)[s * kTopk + lane] = index;
      if (weighted) At<float>(r, a.off_disp_weights)[s * kTopk + lane] = weight;
    }
    for (int w = lane; w < scale_words; w += 32) At<unsigned>(r, a.off_disp_scales + s * a.scale_bytes)[w] = scales[w];
    if (lane == 0) At<int>(r, a.off_disp_src_pos)[s] = src_pos;
  }
}

__device__ __forceinline__ int CheckedSlot(const mori_ep_args_t& a, unsigned slot) {
  if (slot >= static_cast<unsigned>(a.max_recv)) {
    RecordError(a, MORI_EP_ERR_RECV_OVERFLOW);
    return -1;
  }
  return static_cast<int>(slot);
}

// The last block: signal every PE, then wait for all of them and reset the receive state.
__device__ void Complete(const mori_ep_args_t& a, const unsigned long long* peers) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  for (int pe = a.local_first + threadIdx.x; pe < a.local_first + a.local_count; pe += blockDim.x) {
    unsigned* signal = At<unsigned>(peers[pe], MORI_EP_CTRL_SIGNALS) + a.rank;
    WaitFor(a, signal, [](unsigned v) { return v == 0u; });  // our previous signal was consumed
    unsigned* sent = At<unsigned>(a.region, MORI_EP_CTRL_SENT) + pe;
    const unsigned rows = atomicExch(sent, 0u);
    StReleaseSys(signal, rows + 1);
  }
  for (int pe = a.local_first + threadIdx.x; pe < a.local_first + a.local_count; pe += blockDim.x) {
    const unsigned v = WaitFor(a, At<unsigned>(a.region, MORI_EP_CTRL_SIGNALS) + pe, [](unsigned s) { return s != 0u; });
    atomicAdd(&total, static_cast<unsigned long long>(v > 0 ? v - 1 : 0));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long received = total;
    if (received > static_cast<unsigned long long>(a.max_recv)) {
      RecordError(a, MORI_EP_ERR_RECV_OVERFLOW);
      received = a.max_recv;
    }
    *At<int>(a.region, MORI_EP_CTRL_TOTAL_RECV) = static_cast<int>(received);
    *At<unsigned>(a.region, MORI_EP_CTRL_RECV_OFFSET) = 0;
    __threadfence_system();  // the reset offset before the cleared signals that allow reuse
  }
  __syncthreads();
  for (int pe = a.local_first + threadIdx.x; pe < a.local_first + a.local_count; pe += blockDim.x) {
    StReleaseSys(At<unsigned>(a.region, MORI_EP_CTRL_SIGNALS) + pe, 0u);
  }
}

// The three ways a block sends its tokens [first, end); each leaves the rows it sent per
// destination in counts.

// A routing handle's layout (MORI_EP_REPLAY): the slots are in the dest map already.
__device__ void SendReplay(const mori_ep_args_t& a, const unsigned long long* peers, unsigned* counts, int first,
                           int end) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int* dest_map = DestMap(a);  // MORI_EP_NET: the handle's forward map of the hop rows
  for (int t = first + warp; t < end; t += warps) {
    const int flat = lane < kTopk ? dest_map[t * kTopk + lane] : -1;
    int pe = flat >= 0 ? flat / a.max_recv : -1;
    if (pe < a.local_first || pe >= a.local_first + a.local_count) pe = -1;  // a stray entry never leaves the node
    if (pe >= 0) atomicAdd(&counts[pe], 1u);
    WriteRows(a, peers, t, lane, pe, pe >= 0 ? flat % a.max_recv : -1);
  }
}

// Low latency: one remote fetch-add per row, a single pass.
__device__ void SendPerRow(const mori_ep_args_t& a, const unsigned long long* peers, unsigned* counts, int first,
                           int end) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int pe = a.local_first + threadIdx.x; pe < a.local_first + a.local_count; pe += blockDim.x) {
    WaitFor(a, At<unsigned>(peers[pe], MORI_EP_CTRL_SIGNALS) + a.rank, [](unsigned v) { return v == 0u; });
  }
  __syncthreads();
  for (int t = first + warp; t < end; t += warps) {
    const int pe = Route(a, t, lane);
    int slot = -1;
    if (pe >= 0) {
      atomicAdd(&counts[pe], 1u);
      slot = CheckedSlot(a, atomicAdd_system(At<unsigned>(peers[pe], MORI_EP_CTRL_RECV_OFFSET), 1u));
    }
    WriteRows(a, peers, t, lane, pe, slot);
  }
}

// Normal: count per destination, one remote fetch-add per (block, destination), then hand the
// run out with shared-memory atomics.
__device__ void SendCounted(const mori_ep_args_t& a, const unsigned long long* peers, unsigned* counts, int first,
                            int end) {
  __shared__ unsigned bases[kWorld];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int t = first + warp; t < end; t += warps) {
    const int pe = Route(a, t, lane);
    if (pe >= 0) atomicAdd(&counts[pe], 1u);
  }
  __syncthreads();
  for (int pe = threadIdx.x; pe < kWorld; pe += blockDim.x) {
    if (counts[pe] == 0) continue;
    WaitFor(a, At<unsigned>(peers[pe], MORI_EP_CTRL_SIGNALS) + a.rank, [](unsigned v) { return v == 0u; });
    bases[pe] = atomicAdd_system(At<unsigned>(peers[pe], MORI_EP_CTRL_RECV_OFFSET), counts[pe]);
  }
  __syncthreads();
  for (int t = first + warp; t < end; t += warps) {
    const int pe = Route(a, t, lane);
    const int slot = pe >= 0 ? CheckedSlot(a, atomicAdd(&bases[pe], 1u)) : -1;
    WriteRows(a, peers, t, lane, pe, slot);
  }
}

}  // namespace mori::ep

using namespace mori::ep;

extern "C" __global__ void mori_ep_dispatch(const __grid_constant__ mori_ep_args_t a) {
  __shared__ unsigned long long peers[kWorld];
  __shared__ unsigned counts[kWorld];
  for (int pe = threadIdx.x; pe < kWorld; pe += blockDim.x) {
    peers[pe] = reinterpret_cast<const unsigned long long*>(a.peer_regions)[pe];
    counts[pe] = 0;
  }
  __syncthreads();
#if MORI_EP_NET
  // Every node's batch of this call has arrived (mori_ep_net_wait ran first).
  const unsigned long long call = *At<unsigned long long>(a.region, MORI_EP_CTRL_NET_DISPATCH_CALLS);
#endif
  const int per_block = (a.num_tokens + gridDim.x - 1) / gridDim.x;
  const int first = blockIdx.x * per_block;
  const int end = min(a.num_tokens, first + per_block);
  MORI_EP_VIZ_INIT(viz, reinterpret_cast<void*>(a.trace_buf));
  MORI_VIZ_BEGIN(viz, MORI_EP_SLOT_DISPATCH_SEND);
  if (a.flags & MORI_EP_REPLAY) {
    SendReplay(a, peers, counts, first, end);
  } else if (MORI_EP_LL) {
    SendPerRow(a, peers, counts, first, end);
  } else {
    SendCounted(a, peers, counts, first, end);
  }
  __syncthreads();
  MORI_VIZ_END(viz, MORI_EP_SLOT_DISPATCH_SEND);
  MORI_VIZ_INSTANT_ARG(viz, MORI_EP_SLOT_DISPATCH_TOKENS, max(end - first, 0));
  for (int pe = threadIdx.x; pe < kWorld; pe += blockDim.x) {
    if (counts[pe] != 0) atomicAdd(At<unsigned>(a.region, MORI_EP_CTRL_SENT) + pe, counts[pe]);
  }
  if (LastBlock(a, MORI_EP_CTRL_DISPATCH_ARRIVE)) {
    MORI_VIZ_BEGIN(viz, MORI_EP_SLOT_DISPATCH_COMPLETE);
    Complete(a, peers);
#if MORI_EP_NET
    // The hop rows are read: each source may send its next batch.
    const int me = a.rank / a.group;
    for (int node = threadIdx.x; node < kWorld / a.group; node += blockDim.x) {
      mori::shmem::ShmemPutMemNbiSignalThread(At<char>(a.region, a.off_net_hop), At<char>(a.region, a.off_net_hop), 0,
                                              At<unsigned long long>(a.region, MORI_EP_CTRL_NET_HOP_ACK) + me,
                                              call << 32, mori::core::SIGNAL_SET,
                                              node * a.group + a.rank % a.group);
    }
#endif
    MORI_VIZ_END(viz, MORI_EP_SLOT_DISPATCH_COMPLETE);
  }
}
