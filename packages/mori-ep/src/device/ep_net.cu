// SPDX-License-Identifier: MIT
// The send halves of the inter-node kernel types (protocol: src/cpu/net.cpp):
//   mori_ep_net_pack  a warp per token writes one record per destination node into that node's
//                     batch of the send buffer (rows claimed with atomics) and the dest map
//                     (MORI_EP_REPLAY: into the rows a routing handle's dest map names);
//   mori_ep_net_send  puts node's batch (dispatch records, or with `replies` the combine replies)
//                     to the PE of our rail on that node with the signal (call << 32 | rows): a
//                     peer behind the device proxy gets the batch as one put-with-signal request;
//                     a load/store peer gets it from all the node's blocks (node, slice), and the
//                     last slice to finish sets the signal;
//   mori_ep_net_wait  one block waits for what the next launch needs: every node's batch, every
//                     node's replies, or the proxies' acknowledgements of our previous batches.
// Waits for the network live in that one-block kernel, never in a full grid, so that spinning grids
// of PEs sharing a GPU leave SMs free. The signals these kernels send are sets, which mori-shmem's
// remote transport applies with a stream write that needs no SM at all.
// Puts go through mori-shmem's device API, so a peer on another host is reached by the device
// proxy and one on this host by P2P stores, with the same code.
// Compile-time constants: MORI_EP_WORLD, MORI_EP_TOPK.
#include "ep_kernel.cuh"
#include "mori_shmem/mori_shmem_device.cuh"

namespace mori::ep {

__device__ __forceinline__ int NodeOfExpert(const mori_ep_args_t& a, int expert) {
  return expert / a.experts_per_rank / a.group;
}

// One record of `token` at `record`, by one warp.
__device__ __forceinline__ void WriteRecord(const mori_ep_args_t& a, int token, char* record, int lane) {
  const uint4* src = reinterpret_cast<const uint4*>(a.input + static_cast<unsigned long long>(token) * a.row_bytes);
  for (int v = lane; v < a.row_bytes / 16; v += 32) StGlobal(reinterpret_cast<uint4*>(record) + v, LdGlobal(src + v));
  if (lane < kTopk) {
    const unsigned long long pick = static_cast<unsigned long long>(token) * kTopk + lane;
    reinterpret_cast<int*>(record + MORI_EP_RECORD_INDICES(a))[lane] = reinterpret_cast<const int*>(a.indices)[pick];
    if (a.flags & MORI_EP_HAS_WEIGHTS) {
      reinterpret_cast<float*>(record + MORI_EP_RECORD_WEIGHTS(a))[lane] = reinterpret_cast<const float*>(a.weights)[pick];
    }
  }
  if (a.flags & MORI_EP_HAS_SCALES) {
    const unsigned* scales = reinterpret_cast<const unsigned*>(a.scales + static_cast<unsigned long long>(token) * a.scale_bytes);
    for (int w = lane; w < a.scale_bytes / 4; w += 32) reinterpret_cast<unsigned*>(record + MORI_EP_RECORD_SCALES(a))[w] = scales[w];
  }
  if (lane == 0) *reinterpret_cast<int*>(record + MORI_EP_RECORD_SRC_POS(a)) = a.rank * kWorld * a.max_tokens + token;
}

}  // namespace mori::ep

using namespace mori::ep;

extern "C" __global__ void mori_ep_net_pack(const __grid_constant__ mori_ep_args_t a) {
  const auto [lane, warp, warps] = ThisWarp();
  unsigned* batch_rows = At<unsigned>(a.region, MORI_EP_CTRL_NET_SEND_COUNT);
  int* dest_map = At<int>(a.region, a.off_dest_map);
  const bool replay = (a.flags & MORI_EP_REPLAY) != 0;
  const int rows = kWorld / a.group * a.max_tokens;
  for (int token = warp; token < a.num_tokens; token += warps) {
    if (replay) {
      // A routing handle's records: its dest map (copied in by the host) names each record's row,
      // and the batches count the same rows as in the dispatch the handle came from.
      int flat = lane < kTopk ? dest_map[token * kTopk + lane] : -1;
      if (flat >= rows) flat = -1;
      if (flat >= 0) atomicAdd(&batch_rows[flat / a.max_tokens], 1u);
      for (unsigned rest = __ballot_sync(kFullMask, flat >= 0); rest != 0; rest &= rest - 1) {
        const int row = __shfl_sync(kFullMask, flat, __ffs(rest) - 1);
        WriteRecord(a, token, At<char>(a.region, a.off_net_send + static_cast<unsigned long long>(row) * a.record_bytes),
                    lane);
      }
      continue;
    }
    int node = -1;
    if (lane < kTopk) {
      const int expert = reinterpret_cast<const int*>(a.indices)[token * kTopk + lane];
      if (expert >= a.experts_per_rank * kWorld) {
        RecordError(a, MORI_EP_ERR_BAD_EXPERT);
      } else if (expert >= 0) {
        node = NodeOfExpert(a, expert);
      }
    }
    const unsigned same = __match_any_sync(kFullMask, node);
    const bool first = node >= 0 && __ffs(same) - 1 == lane;
    const int flat = first ? node * a.max_tokens + static_cast<int>(atomicAdd(&batch_rows[node], 1u)) : -1;
    if (lane < kTopk) dest_map[token * kTopk + lane] = flat;
    for (unsigned rest = __ballot_sync(kFullMask, first); rest != 0; rest &= rest - 1) {
      const int row = __shfl_sync(kFullMask, flat, __ffs(rest) - 1);
      WriteRecord(a, token, At<char>(a.region, a.off_net_send + static_cast<unsigned long long>(row) * a.record_bytes),
                  lane);
    }
  }
  if (LastBlock(a, MORI_EP_CTRL_DISPATCH_ARRIVE) && threadIdx.x == 0) {
    ++*At<unsigned long long>(a.region, MORI_EP_CTRL_NET_DISPATCH_CALLS);  // the call number of this dispatch
  }
}

extern "C" __global__ void mori_ep_net_send(const __grid_constant__ mori_ep_args_t a, int replies) {
  const int nodes = kWorld / a.group, me = a.rank / a.group;
  const int slices = gridDim.x / nodes;  // the host launches nodes * slices blocks
  const int node = blockIdx.x / slices, slice = blockIdx.x % slices;
  const int peer = node * a.group + a.rank % a.group;
  const unsigned long long M = a.max_tokens;
  unsigned long long call, stride, from, to, signal;
  unsigned rows;
  if (replies) {
    call = *At<unsigned long long>(a.region, MORI_EP_CTRL_COMBINE_CALLS);
    rows = static_cast<unsigned>(*At<unsigned long long>(a.region, MORI_EP_CTRL_NET_HOP_SIGNAL + 8ull * node));
    stride = a.reply_bytes;
    from = a.off_net_reply + node * M * stride;
    to = a.off_net_reply_recv + me * M * stride;
    signal = MORI_EP_CTRL_NET_REPLY_SIGNAL + 8ull * me;
  } else {
    call = *At<unsigned long long>(a.region, MORI_EP_CTRL_NET_DISPATCH_CALLS);
    rows = *At<unsigned>(a.region, MORI_EP_CTRL_NET_SEND_COUNT + 4ull * node);
    stride = a.record_bytes;
    from = a.off_net_send + node * M * stride;
    to = a.off_net_hop + me * M * stride;
    signal = MORI_EP_CTRL_NET_HOP_SIGNAL + 8ull * me;
  }
  if (reinterpret_cast<const unsigned long long*>(a.peer_regions)[peer] == 0) {
    // Another host: one request, whose signal the proxy applies after its data.
    if (slice != 0) return;
    mori::shmem::ShmemPutMemNbiSignalBlock(At<char>(a.region, to), At<char>(a.region, from), rows * stride,
                                           At<unsigned long long>(a.region, signal), call << 32 | rows,
                                           mori::core::SIGNAL_SET, peer);
    if (!replies && threadIdx.x == 0) *At<unsigned>(a.region, MORI_EP_CTRL_NET_SEND_COUNT + 4ull * node) = 0;
    return;
  }
  const unsigned long long first = rows * static_cast<unsigned long long>(slice) / slices;
  const unsigned long long last = rows * static_cast<unsigned long long>(slice + 1) / slices;
  if (last > first) {
    mori::shmem::ShmemPutMemNbiBlock(At<char>(a.region, to + first * stride), At<char>(a.region, from + first * stride),
                                     (last - first) * stride, peer);
  }
  __shared__ bool finished_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    unsigned* done = At<unsigned>(a.region, MORI_EP_CTRL_NET_SEND_DONE) + node;
    finished_last = atomicAdd(done, 1u) == static_cast<unsigned>(slices - 1);
    if (finished_last) *done = 0;
  }
  __syncthreads();
  // Every slice's stores reach the peer before the signal: each block fenced them before its
  // count, and the signal is a system-scope release after the last count.
  if (finished_last && threadIdx.x == 0) {
    mori::shmem::ShmemPutMemNbiSignalThread(At<char>(a.region, to), At<char>(a.region, from), 0,
                                            At<unsigned long long>(a.region, signal), call << 32 | rows,
                                            mori::core::SIGNAL_SET, peer);
    if (!replies) *At<unsigned>(a.region, MORI_EP_CTRL_NET_SEND_COUNT + 4ull * node) = 0;
  }
}

// What mori_ep_net_wait waits for (its second argument).
#define MORI_EP_NET_WAIT_BATCHES 0  // every node's dispatch records of this call
#define MORI_EP_NET_WAIT_REPLIES 1  // every node's combine replies of this call
#define MORI_EP_NET_WAIT_ACKS 2     // every proxy forwarded our previous batch (its rows may be reused)

extern "C" __global__ void mori_ep_net_wait(const __grid_constant__ mori_ep_args_t a, int what) {
  unsigned long long call = *At<unsigned long long>(
      a.region, what == MORI_EP_NET_WAIT_REPLIES ? MORI_EP_CTRL_COMBINE_CALLS : MORI_EP_CTRL_NET_DISPATCH_CALLS);
  unsigned long long words = MORI_EP_CTRL_NET_HOP_SIGNAL;
  if (what == MORI_EP_NET_WAIT_REPLIES) words = MORI_EP_CTRL_NET_REPLY_SIGNAL;
  if (what == MORI_EP_NET_WAIT_ACKS) {
    words = MORI_EP_CTRL_NET_HOP_ACK;
    call -= 1;
  }
  for (int node = threadIdx.x; node < kWorld / a.group; node += blockDim.x) {
    WaitFor(a, At<unsigned long long>(a.region, words) + node, [call](unsigned long long v) { return (v >> 32) >= call; });
  }
}
