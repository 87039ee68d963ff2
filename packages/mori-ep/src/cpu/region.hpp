// SPDX-License-Identifier: MIT
// Typed access to a PE's region (ep_args.h) for the cpu backend.
#pragma once

#include <cstdint>

#include "../device/ep_args.h"

namespace mori::ep::cpu {

struct Region {
  char* base;

  template <typename T>
  T* At(unsigned long long offset) const {
    return reinterpret_cast<T*>(base + offset);
  }
  uint32_t* RecvOffset() const { return At<uint32_t>(MORI_EP_CTRL_RECV_OFFSET); }
  uint32_t* Error() const { return At<uint32_t>(MORI_EP_CTRL_ERROR); }
  uint64_t* CombineCalls() const { return At<uint64_t>(MORI_EP_CTRL_COMBINE_CALLS); }
  int32_t* TotalRecv() const { return At<int32_t>(MORI_EP_CTRL_TOTAL_RECV); }
  uint32_t* Signal(int pe) const { return At<uint32_t>(MORI_EP_CTRL_SIGNALS) + pe; }
  uint64_t* Barrier(int pe) const { return At<uint64_t>(MORI_EP_CTRL_BARRIER) + pe; }
  uint64_t* NetHopSignal(int node) const { return At<uint64_t>(MORI_EP_CTRL_NET_HOP_SIGNAL) + node; }
  uint64_t* NetHopAck(int node) const { return At<uint64_t>(MORI_EP_CTRL_NET_HOP_ACK) + node; }
  uint64_t* NetReplySignal(int node) const { return At<uint64_t>(MORI_EP_CTRL_NET_REPLY_SIGNAL) + node; }
  uint64_t* NetDispatchCalls() const { return At<uint64_t>(MORI_EP_CTRL_NET_DISPATCH_CALLS); }
};

inline Region Local(const mori_ep_args_t& a) { return Region{reinterpret_cast<char*>(a.region)}; }

inline Region Peer(const mori_ep_args_t& a, int pe) {
  return Region{reinterpret_cast<char*>(reinterpret_cast<const unsigned long long*>(a.peer_regions)[pe])};
}

// The first error of this PE wins; later ones would only hide the cause.
inline void RecordError(const mori_ep_args_t& a, uint32_t code) {
  uint32_t expected = MORI_EP_OK;
  __atomic_compare_exchange_n(Local(a).Error(), &expected, code, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

}  // namespace mori::ep::cpu
