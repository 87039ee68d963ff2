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
#include <cstring>
#include <string>
#include <vector>

#include "ep_cpu.hpp"
#include "region.hpp"
#include "sync.hpp"

namespace mori::ep::cpu {

namespace {

std::vector<int> Route(const mori_ep_args_t& a, std::vector<uint32_t>& count) {
  const int K = a.topk;
  const int total_experts = a.world_size * a.experts_per_rank;
  const int* indices = reinterpret_cast<const int*>(a.indices);
  std::vector<int> dest(static_cast<size_t>(a.num_tokens) * K, -1);
  for (int t = 0; t < a.num_tokens; ++t) {
    for (int k = 0; k < K; ++k) {
      const int expert = indices[t * K + k];
      if (expert < 0) continue;
      if (expert >= total_experts) {
        RecordError(a, MORI_EP_ERR_BAD_EXPERT);
        continue;
      }
      const int pe = expert / a.experts_per_rank;
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

void WriteRow(const mori_ep_args_t& a, int t, const Region& peer, int slot) {
  const int K = a.topk;
  std::memcpy(peer.At<char>(a.off_disp_tokens) + static_cast<size_t>(slot) * a.row_bytes,
              reinterpret_cast<const char*>(a.input) + static_cast<size_t>(t) * a.row_bytes, a.row_bytes);
  std::memcpy(peer.At<int>(a.off_disp_indices) + static_cast<size_t>(slot) * K,
              reinterpret_cast<const int*>(a.indices) + static_cast<size_t>(t) * K, K * sizeof(int));
  if (a.flags & MORI_EP_HAS_WEIGHTS) {
    std::memcpy(peer.At<float>(a.off_disp_weights) + static_cast<size_t>(slot) * K,
                reinterpret_cast<const float*>(a.weights) + static_cast<size_t>(t) * K, K * sizeof(float));
  }
  if (a.flags & MORI_EP_HAS_SCALES) {
    std::memcpy(peer.At<char>(a.off_disp_scales) + static_cast<size_t>(slot) * a.scale_bytes,
                reinterpret_cast<const char*>(a.scales) + static_cast<size_t>(t) * a.scale_bytes, a.scale_bytes);
  }
  peer.At<int>(a.off_disp_src_pos)[slot] = a.rank * a.world_size * a.max_tokens + t;
}

}  // namespace

void Dispatch(const mori_ep_args_t& a) {
  const int W = a.world_size, K = a.topk;
  const Region local = Local(a);
  int* dest_map = local.At<int>(a.off_dest_map);
  const bool replay = (a.flags & MORI_EP_REPLAY) != 0;
  std::vector<uint32_t> count(W, 0);
  // replay: a routing handle's slots are in the dest map already; nothing is reserved.
  std::vector<int> dest(static_cast<size_t>(a.num_tokens) * K, -1);
  if (replay) {
    for (size_t i = 0; i < dest.size(); ++i) {
      if (dest_map[i] >= 0) ++count[dest[i] = dest_map[i] / a.max_recv];
    }
  } else {
    dest = Route(a, count);
  }

  std::vector<uint32_t> base(W, 0), cursor(W, 0);
  for (int pe = 0; pe < W; ++pe) {
    WaitConsumed(a, pe);
    if (count[pe] > 0 && !replay) base[pe] = FetchAdd(Peer(a, pe).RecvOffset(), count[pe]);
  }

  for (int t = 0; t < a.num_tokens; ++t) {
    for (int k = 0; k < K; ++k) {
      const int pe = dest[t * K + k];
      int flat = -1;
      if (pe >= 0) {
        const uint32_t slot = replay ? static_cast<uint32_t>(dest_map[t * K + k] % a.max_recv) : base[pe] + cursor[pe]++;
        if (slot < static_cast<uint32_t>(a.max_recv)) {
          WriteRow(a, t, Peer(a, pe), static_cast<int>(slot));
          flat = pe * a.max_recv + static_cast<int>(slot);
        } else {
          RecordError(a, MORI_EP_ERR_RECV_OVERFLOW);  // the receiver records it too
        }
      }
      dest_map[t * K + k] = flat;
    }
  }

  for (int pe = 0; pe < W; ++pe) StoreRelease(Peer(a, pe).Signal(a.rank), count[pe] + 1);

  uint64_t total = 0;
  for (int pe = 0; pe < W; ++pe) {
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
  for (int pe = 0; pe < W; ++pe) StoreRelease(local.Signal(pe), 0u);
}

}  // namespace mori::ep::cpu
