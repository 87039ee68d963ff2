// SPDX-License-Identifier: MIT
// ShmemFenceThread / ShmemQuietThread.
//
// Why a single system-scope fence is all either needs on the load/store (P2P) transport: a put is
// a run of ordinary stores through the peer's mapping and a get a run of loads, issued by the
// calling thread itself. There is no queue of outstanding requests to drain, as there is for
// RDMA; a store becomes visible to every observer on its own, and what any observer can tell
// apart is only the order in which this thread's accesses become visible relative to each other.
// So:
//   - fence (order my earlier puts/AMOs before my later ones, to any PE) is store->store order:
//     fence.acq_rel.sys. It also orders earlier loads, so an earlier get cannot read data that a
//     later put changed.
//   - quiet (my earlier puts/gets/AMOs are complete before anything I do next) must also order
//     earlier stores before LATER LOADS, e.g. put data, quiet, then read a flag that a peer sets
//     only after seeing the data: that is store->load order, which only the sequentially
//     consistent fence gives: fence.sc.sys, i.e. __threadfence_system().
// Both order the calling thread's accesses. After a warp- or block-scope put (which ends with
// __syncwarp / __syncthreads) one thread's fence also covers the other threads' stores, because
// the barrier puts them before the fence in causality order and the fence is cumulative.
// The pe and qpId arguments exist for MORI/NVSHMEM compatibility; a fence here covers all PEs.
// When some PE is behind the device proxy (proxy.cuh), both also wait until the proxy has
// completed every earlier request at its target.
#pragma once

#include "proxy.cuh"
#include "ptx.cuh"
#include "state.cuh"

namespace mori::shmem {

__device__ __forceinline__ void ShmemFenceThread(const ShmemDeviceState& st) {
  detail::FenceAcqRelSys();
  if (detail::HasProxy(st)) detail::ProxyQuiet(MORI_SHMEM_PROXY_ARGS(st), st.my_pe);  // requests to remote PEs: quiet is the fence
}
__device__ __forceinline__ void ShmemFenceThread(const ShmemDeviceState& st, int pe, int qpId = 0) {
  (void)pe;
  (void)qpId;
  ShmemFenceThread(st);
}
__device__ __forceinline__ void ShmemQuietThread(const ShmemDeviceState& st) {
  detail::FenceScSys();
  if (detail::HasProxy(st)) detail::ProxyQuiet(MORI_SHMEM_PROXY_ARGS(st), st.my_pe);
}
__device__ __forceinline__ void ShmemQuietThread(const ShmemDeviceState& st, int pe, int qpId = 0) {
  (void)pe;
  (void)qpId;
  ShmemQuietThread(st);
}

__device__ __forceinline__ void ShmemFenceThread() { ShmemFenceThread(MORI_SHMEM_GLOBAL_STATE); }
__device__ __forceinline__ void ShmemFenceThread(int pe, int qpId = 0) {
  ShmemFenceThread(MORI_SHMEM_GLOBAL_STATE, pe, qpId);
}
__device__ __forceinline__ void ShmemQuietThread() { ShmemQuietThread(MORI_SHMEM_GLOBAL_STATE); }
__device__ __forceinline__ void ShmemQuietThread(int pe, int qpId = 0) {
  ShmemQuietThread(MORI_SHMEM_GLOBAL_STATE, pe, qpId);
}

}  // namespace mori::shmem
