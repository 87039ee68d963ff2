// SPDX-License-Identifier: MIT
// The inter-node kernel types on the cpu backend; the kernels of src/device/ep_net.cu do the same.
//
// PEs are grouped into routing nodes of `group` PEs (gpu_per_node for InterNodeV1/V1LL, 1 for
// InterNode/AsyncLL). Only a node's own PEs are reached by load/store; everything that crosses
// nodes is one mori-shmem put-with-signal per (source, destination node) and call, so it runs
// over whatever transport mori-shmem picked for the peer (P2P, TCP, UCX, the device proxy).
//
// dispatch, send half
//   pack    each token becomes one record per destination node (however many of that node's
//           PEs it picks) in the node's batch of the send buffer; the dest map keeps
//           node * max_tokens + index of the record for combine;
//           (MORI_EP_REPLAY: a routing handle's dest map, copied in by the host, places them);
//   send    the batch goes to the node's proxy, the PE with our index within its node (rail
//           aligned), into its hop buffer at our node's rows, with the signal (call << 32 | rows),
//           after that proxy acknowledged our previous call's batch.
// dispatch, receive half
//   forward the proxy waits for every node's batch and fans the records out to its node's PEs
//           with the intra-node protocol (dispatch.cpp with MORI_EP_FORWARD; with MORI_EP_REPLAY
//           into the slots of the handle's forward map), then acknowledges each batch to its sender.
// combine, send half
//   stage   as intra-node, with the barrier among the node's PEs;
//   reduce  for each record it forwarded, the proxy sums the node's rows for it (a pull over the
//           forward's dest map) into a reply, and sends each source node's replies back to the
//           source PE on its rail, signalled like the batches.
// combine, receive half
//   sum     each token adds the replies of the nodes its dest map names, in fp32.
// The call numbers in the signals make every wait exact without resetting words across nodes.
#include <cstring>
#include <string>
#include <vector>

#include "ep_cpu.hpp"
#include "region.hpp"
#include "sync.hpp"

#include "mori_shmem/mori_shmem.h"

namespace mori::ep::cpu {

namespace {

int Nodes(const mori_ep_args_t& a) { return a.world_size / a.group; }
int MyNode(const mori_ep_args_t& a) { return a.rank / a.group; }
int RailPeer(const mori_ep_args_t& a, int node) { return node * a.group + a.rank % a.group; }
uint64_t Tag(uint64_t call, uint32_t rows) { return call << 32 | rows; }
uint64_t CallOf(uint64_t tag) { return tag >> 32; }
uint32_t RowsOf(uint64_t tag) { return static_cast<uint32_t>(tag); }

void Check(int rc, const std::string& what) {
  if (rc == MORI_SHMEM_SUCCESS) return;
  const std::string message = what + ": " + mori_shmem_last_error();
  if (rc == MORI_SHMEM_ERR_TIMEOUT || rc == MORI_SHMEM_ERR_WAIT_TIMEOUT) throw WaitTimeout(message);
  throw PeerFailure(message);
}

// rows * stride bytes from this PE's `from` to `to` on pe (same symmetric offsets), then the
// signal word at `signal` on pe set to `tag`.
void PutSignal(const mori_ep_args_t& a, unsigned long long to, unsigned long long from, size_t bytes,
               unsigned long long signal, uint64_t tag, int pe, const std::string& what) {
  char* region = Local(a).base;
  uint64_t* sig = reinterpret_cast<uint64_t*>(region + signal);
  if (bytes == 0) {
    Check(mori_shmem_signal_op(sig, tag, MORI_SHMEM_SIGNAL_SET, pe), what);
  } else {
    Check(mori_shmem_putmem_signal(region + to, region + from, bytes, sig, tag, MORI_SHMEM_SIGNAL_SET, pe), what);
  }
}

void WaitCall(const mori_ep_args_t& a, const uint64_t* word, uint64_t call, const std::string& what) {
  WaitFor(word, [call](uint64_t v) { return CallOf(v) >= call; }, a.spin_timeout_ns, what);
}

void WriteRecord(const mori_ep_args_t& a, int t, char* record) {
  const int K = a.topk;
  std::memcpy(record, reinterpret_cast<const char*>(a.input) + static_cast<size_t>(t) * a.row_bytes, a.row_bytes);
  std::memcpy(record + MORI_EP_RECORD_INDICES(a), reinterpret_cast<const int*>(a.indices) + static_cast<size_t>(t) * K,
              K * sizeof(int));
  if (a.flags & MORI_EP_HAS_WEIGHTS) {
    std::memcpy(record + MORI_EP_RECORD_WEIGHTS(a),
                reinterpret_cast<const float*>(a.weights) + static_cast<size_t>(t) * K, K * sizeof(float));
  }
  if (a.flags & MORI_EP_HAS_SCALES) {
    std::memcpy(record + MORI_EP_RECORD_SCALES(a),
                reinterpret_cast<const char*>(a.scales) + static_cast<size_t>(t) * a.scale_bytes, a.scale_bytes);
  }
  const int pos = a.rank * a.world_size * a.max_tokens + t;
  std::memcpy(record + MORI_EP_RECORD_SRC_POS(a), &pos, sizeof pos);
}

}  // namespace

void NetDispatchSend(const mori_ep_args_t& a) {
  const int K = a.topk, M = a.max_tokens, nodes = Nodes(a);
  const int total_experts = a.world_size * a.experts_per_rank;
  const Region local = Local(a);
  const uint64_t call = ++*local.NetDispatchCalls();
  int* dest_map = local.At<int>(a.off_dest_map);
  char* send = local.At<char>(a.off_net_send);
  const int* indices = reinterpret_cast<const int*>(a.indices);
  std::vector<uint32_t> count(nodes, 0);
  if (a.flags & MORI_EP_REPLAY) {
    // A routing handle's records: its dest map (copied in by the host) names each record's row.
    for (int i = 0; i < a.num_tokens * K; ++i) {
      const int flat = dest_map[i];
      if (flat < 0 || flat >= nodes * M) continue;
      WriteRecord(a, i / K, send + static_cast<size_t>(flat) * a.record_bytes);
      ++count[flat / M];
    }
  }
  for (int t = 0; t < a.num_tokens && !(a.flags & MORI_EP_REPLAY); ++t) {
    for (int k = 0; k < K; ++k) {
      const int expert = indices[t * K + k];
      int flat = -1;
      if (expert >= total_experts) {
        RecordError(a, MORI_EP_ERR_BAD_EXPERT);
      } else if (expert >= 0) {
        const int node = expert / a.experts_per_rank / a.group;
        bool duplicate = false;
        for (int j = 0; j < k; ++j) {
          const int other = indices[t * K + j];
          duplicate = duplicate || (other >= 0 && other < total_experts && other / a.experts_per_rank / a.group == node);
        }
        if (!duplicate) {
          flat = node * M + static_cast<int>(count[node]);
          WriteRecord(a, t, send + static_cast<size_t>(flat) * a.record_bytes);
          ++count[node];
        }
      }
      dest_map[t * K + k] = flat;
    }
  }
  const int me = MyNode(a);
  for (int node = 0; node < nodes; ++node) {
    const int proxy = RailPeer(a, node);
    WaitCall(a, local.NetHopAck(node), call - 1,
             "dispatch: the proxy PE " + std::to_string(proxy) + " did not take the previous batch");
    PutSignal(a, a.off_net_hop + static_cast<size_t>(me) * M * a.record_bytes,
              a.off_net_send + static_cast<size_t>(node) * M * a.record_bytes,
              static_cast<size_t>(count[node]) * a.record_bytes, MORI_EP_CTRL_NET_HOP_SIGNAL + 8ull * me,
              Tag(call, count[node]), proxy, "dispatch: sending records to PE " + std::to_string(proxy));
  }
}

void NetDispatchRecv(const mori_ep_args_t& a) {
  const Region local = Local(a);
  const uint64_t call = *local.NetDispatchCalls();
  const int nodes = Nodes(a), me = MyNode(a);
  for (int node = 0; node < nodes; ++node) {
    WaitCall(a, local.NetHopSignal(node), call,
             "dispatch: no records from PE " + std::to_string(RailPeer(a, node)));
  }
  mori_ep_args_t forward = a;
  forward.flags |= MORI_EP_FORWARD;  // with MORI_EP_REPLAY: the slots of the handle's forward map
  Dispatch(forward);
  for (int node = 0; node < nodes; ++node) {
    const int source = RailPeer(a, node);
    Check(mori_shmem_signal_op(local.NetHopAck(me), Tag(call, 0), MORI_SHMEM_SIGNAL_SET, source),
          "dispatch: acknowledging PE " + std::to_string(source));
  }
}

void NetCombineSend(const mori_ep_args_t& a, int dtype, int quant) {
  CombineStageAndBarrier(a, dtype, quant);
  const Region local = Local(a);
  const uint64_t call = *local.CombineCalls();
  const int M = a.max_tokens, nodes = Nodes(a), me = MyNode(a);
  std::vector<uint32_t> rows(nodes);
  for (int node = 0; node < nodes; ++node) rows[node] = RowsOf(*local.NetHopSignal(node));

  PullTarget target;
  target.dest_map = local.At<int>(a.off_net_hop_map);
  target.rows = nodes * M;
  target.valid = [&](int r) { return static_cast<uint32_t>(r % M) < rows[r / M]; };
  target.out = local.At<char>(a.off_net_reply);
  target.out_stride = a.reply_bytes;
  target.weights = target.out + MORI_EP_REPLY_WEIGHTS(a);
  target.weights_stride = a.reply_bytes;
  Pull(a, dtype, quant, target);

  for (int node = 0; node < nodes; ++node) {
    const int source = RailPeer(a, node);
    PutSignal(a, a.off_net_reply_recv + static_cast<size_t>(me) * M * a.reply_bytes,
              a.off_net_reply + static_cast<size_t>(node) * M * a.reply_bytes,
              static_cast<size_t>(rows[node]) * a.reply_bytes, MORI_EP_CTRL_NET_REPLY_SIGNAL + 8ull * me,
              Tag(call, rows[node]), source, "combine: sending replies to PE " + std::to_string(source));
  }
}

void NetCombineRecv(const mori_ep_args_t& a, int dtype) {
  const Region local = Local(a);
  const uint64_t call = *local.CombineCalls();
  const int K = a.topk, nodes = Nodes(a);
  for (int node = 0; node < nodes; ++node) {
    WaitCall(a, local.NetReplySignal(node), call,
             "combine: no replies from PE " + std::to_string(RailPeer(a, node)));
  }
  const int* dest_map = local.At<int>(a.off_dest_map);
  const char* replies = local.At<char>(a.off_net_reply_recv);
  std::vector<float> acc(a.hidden), weights(K);
  for (int t = 0; t < a.num_tokens; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(weights.begin(), weights.end(), 0.0f);
    for (int k = 0; k < K; ++k) {
      const int flat = dest_map[t * K + k];
      if (flat < 0) continue;
      const char* reply = replies + static_cast<size_t>(flat) * a.reply_bytes;
      for (int i = 0; i < a.hidden; ++i) acc[i] += LoadElement(reply, i, dtype);
      const float* w = reinterpret_cast<const float*>(reply + MORI_EP_REPLY_WEIGHTS(a));
      for (int j = 0; j < K; ++j) weights[j] += w[j];
    }
    char* out = local.At<char>(a.off_comb_out) + static_cast<size_t>(t) * a.row_bytes;
    for (int i = 0; i < a.hidden; ++i) StoreElement(out, i, dtype, acc[i]);
    if (a.flags & MORI_EP_HAS_WEIGHTS) {
      std::memcpy(local.At<float>(a.off_comb_out_weights) + static_cast<size_t>(t) * K, weights.data(),
                  K * sizeof(float));
    }
  }
}

}  // namespace mori::ep::cpu
