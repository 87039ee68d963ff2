// SPDX-License-Identifier: MIT
// Dispatch on the cpu backend. The protocol is the kernels' one, step for step:
//   1. route: each (token, k) pick names a destination PE; a token goes at most once to each PE
//      (the first pick of a PE sends, later picks of the same PE are duplicates);
//   2. reserve: one fetch-add per destination on its receive offset claims a run of rows, after
//      waiting until that PE consumed our previous call's signal (it resets its offset first);
//   3. write the rows (token, full top-k indices and weights, scales, source position) straight
//      into the destination's region;
//   4. signal each destination with (rows sent + 1): the +1 tells "nothing sent" from "not yet";
//   5. wait for every PE's signal, publish the total, reset the offset, then clear the signals.
// With MORI_EP_REPLAY the slots of step 2 come from the dest map (a routing handle's) instead.
// Steps 2-5 span the PEs [local_first, +local_count) (all of them for the intra-node types). With
// MORI_EP_FORWARD the rows are the records an inter-node proxy received (net.cpp), and their
// picks of PEs outside that range are left to the other nodes.
#include <cstring>
#include <string>
#include <vector>

#include "ep_cpu.hpp"
#include "region.hpp"
#include "sync.hpp"

namespace mori::ep::cpu {

namespace {

// The rows a dispatch sends: the caller's tensors, or (MORI_EP_FORWARD) the records of the hop
// buffer, [nodes][max_tokens] of which the first rows of each node's batch are valid.
class Rows {
 public:
  explicit Rows(const mori_ep_args_t& a) : a_(a), forward_((a.flags & MORI_EP_FORWARD) != 0) {
    if (!forward_) return;
    const int nodes = a.world_size / a.group;
    hop_ = Local(a).At<char>(a.off_net_hop);
    counts_.resize(nodes);
    for (int n = 0; n < nodes; ++n) counts_[n] = static_cast<uint32_t>(*Local(a).NetHopSignal(n));
  }
  int size() const { return forward_ ? static_cast<int>(counts_.size()) * a_.max_tokens : a_.num_tokens; }
  bool forward() const { return forward_; }
  bool Valid(int r) const { return !forward_ || static_cast<uint32_t>(r % a_.max_tokens) < counts_[r / a_.max_tokens]; }
  const char* Token(int r) const {
    return forward_ ? Record(r) : reinterpret_cast<const char*>(a_.input) + static_cast<size_t>(r) * a_.row_bytes;
  }
  const int* Indices(int r) const {
    return forward_ ? reinterpret_cast<const int*>(Record(r) + MORI_EP_RECORD_INDICES(a_))
                    : reinterpret_cast<const int*>(a_.indices) + static_cast<size_t>(r) * a_.topk;
  }
  const float* Weights(int r) const {
    return forward_ ? reinterpret_cast<const float*>(Record(r) + MORI_EP_RECORD_WEIGHTS(a_))
                    : reinterpret_cast<const float*>(a_.weights) + static_cast<size_t>(r) * a_.topk;
  }
  const char* Scales(int r) const {
    return forward_ ? Record(r) + MORI_EP_RECORD_SCALES(a_)
                    : reinterpret_cast<const char*>(a_.scales) + static_cast<size_t>(r) * a_.scale_bytes;
  }
  int SrcPos(int r) const {
    if (!forward_) return a_.rank * a_.world_size * a_.max_tokens + r;
    int pos;
    std::memcpy(&pos, Record(r) + MORI_EP_RECORD_SRC_POS(a_), sizeof pos);
    return pos;
  }

 private:
  const char* Record(int r) const { return hop_ + static_cast<size_t>(r) * a_.record_bytes; }
  const mori_ep_args_t& a_;
  bool forward_;
  const char* hop_ = nullptr;
  std::vector<uint32_t> counts_;
};

bool IsLocal(const mori_ep_args_t& a, int pe) { return pe >= a.local_first && pe < a.local_first + a.local_count; }

std::vector<int> Route(const mori_ep_args_t& a, const Rows& rows, std::vector<uint32_t>& count) {
  const int K = a.topk;
  const int total_experts = a.world_size * a.experts_per_rank;
  std::vector<int> dest(static_cast<size_t>(rows.size()) * K, -1);
  for (int t = 0; t < rows.size(); ++t) {
    if (!rows.Valid(t)) continue;
    const int* indices = rows.Indices(t);
    for (int k = 0; k < K; ++k) {
      const int expert = indices[k];
      if (expert < 0) continue;
      if (expert >= total_experts) {
        RecordError(a, MORI_EP_ERR_BAD_EXPERT);
        continue;
      }
      const int pe = expert / a.experts_per_rank;
      if (!IsLocal(a, pe)) continue;
      bool duplicate = false;
      for (int j = 0; j < k; ++j) duplicate = duplicate || dest[t * K + j] == pe;
      if (duplicate) continue;
      dest[t * K + k] = pe;
      ++count[pe];
    }
  }
  return dest;
}

void WaitConsumed(const mori_ep_args_t& a, int pe) {
  WaitFor(Peer(a, pe).Signal(a.rank), [](uint32_t v) { return v == 0; }, a.spin_timeout_ns,
          "dispatch: PE " + std::to_string(pe) + " did not consume the previous dispatch's signal");
}

void WriteRow(const mori_ep_args_t& a, const Rows& rows, int t, const Region& peer, int slot) {
  const int K = a.topk;
  std::memcpy(peer.At<char>(a.off_disp_tokens) + static_cast<size_t>(slot) * a.row_bytes, rows.Token(t), a.row_bytes);
  std::memcpy(peer.At<int>(a.off_disp_indices) + static_cast<size_t>(slot) * K, rows.Indices(t), K * sizeof(int));
  if (a.flags & MORI_EP_HAS_WEIGHTS) {
    std::memcpy(peer.At<float>(a.off_disp_weights) + static_cast<size_t>(slot) * K, rows.Weights(t), K * sizeof(float));
  }
  if (a.flags & MORI_EP_HAS_SCALES) {
    std::memcpy(peer.At<char>(a.off_disp_scales) + static_cast<size_t>(slot) * a.scale_bytes, rows.Scales(t),
                a.scale_bytes);
  }
  peer.At<int>(a.off_disp_src_pos)[slot] = rows.SrcPos(t);
}

}  // namespace

void Dispatch(const mori_ep_args_t& a) {
  const int W = a.world_size, K = a.topk;
  const int first = a.local_first, end = a.local_first + a.local_count;
  const Region local = Local(a);
  const Rows rows(a);
  int* dest_map = local.At<int>(rows.forward() ? a.off_net_hop_map : a.off_dest_map);
  const bool replay = (a.flags & MORI_EP_REPLAY) != 0;
  std::vector<uint32_t> count(W, 0);
  // replay: a routing handle's slots are in the dest map already; nothing is reserved.
  std::vector<int> dest(static_cast<size_t>(rows.size()) * K, -1);
  if (replay) {
    for (size_t i = 0; i < dest.size(); ++i) {
      const int pe = dest_map[i] >= 0 ? dest_map[i] / a.max_recv : -1;
      if (pe >= first && pe < end) ++count[dest[i] = pe];  // a stray entry never leaves the node
    }
  } else {
    dest = Route(a, rows, count);
  }

  std::vector<uint32_t> base(W, 0), cursor(W, 0);
  for (int pe = first; pe < end; ++pe) {
    WaitConsumed(a, pe);
    if (count[pe] > 0 && !replay) base[pe] = FetchAdd(Peer(a, pe).RecvOffset(), count[pe]);
  }

  for (int t = 0; t < rows.size(); ++t) {
    for (int k = 0; k < K; ++k) {
      const int pe = dest[t * K + k];
      int flat = -1;
      if (pe >= 0) {
        const uint32_t slot = replay ? static_cast<uint32_t>(dest_map[t * K + k] % a.max_recv) : base[pe] + cursor[pe]++;
        if (slot < static_cast<uint32_t>(a.max_recv)) {
          WriteRow(a, rows, t, Peer(a, pe), static_cast<int>(slot));
          flat = pe * a.max_recv + static_cast<int>(slot);
        } else {
          RecordError(a, MORI_EP_ERR_RECV_OVERFLOW);  // the receiver records it too
        }
      }
      dest_map[t * K + k] = flat;
    }
  }

  for (int pe = first; pe < end; ++pe) StoreRelease(Peer(a, pe).Signal(a.rank), count[pe] + 1);

  uint64_t total = 0;
  for (int pe = first; pe < end; ++pe) {
    const uint32_t v = WaitFor(local.Signal(pe), [](uint32_t s) { return s != 0; }, a.spin_timeout_ns,
                               "dispatch: no signal from PE " + std::to_string(pe));
    total += v - 1;
  }
  if (total > static_cast<uint64_t>(a.max_recv)) {
    RecordError(a, MORI_EP_ERR_RECV_OVERFLOW);
    total = a.max_recv;
  }
  *local.TotalRecv() = static_cast<int32_t>(total);
  StoreRelease(local.RecvOffset(), 0u);  // before the signals: a sender that sees 0 may reserve again
  for (int pe = first; pe < end; ++pe) StoreRelease(local.Signal(pe), 0u);
}

}  // namespace mori::ep::cpu
