// SPDX-License-Identifier: MIT
// Variants of the 8-byte put-with-signal ping-pong (developer probe, see shmem_latency_probe.py):
// each strips or swaps one ingredient of the library path, so one run says what the 0.2 us gap to
// NVSHMEM is made of. All take mori_bench_pingpong's arguments; peer pointers come from the state.
//   0  the library: ShmemWaitUntil + ShmemPutMemNbiSignalThread (as mori-shmem-bench)
//   1  bare: peer pointers resolved once, acquire poll, 8-byte load/store, release store
//   2  as 1, but relaxed polls and one fence.acq_rel.sys after the value is seen
//   3  as 1, but the signal is fence.acq_rel.sys then a relaxed store
//   4  as 1, but volatile polls and one fence.acq_rel.sys after the value is seen
//   5  as 1, at .gpu scope (PEs on one GPU only: what system scope costs on top)
//   6  the library's put-with-signal, the bare wait
//   7  the bare put-with-signal, the library's wait
//   8  as 1, but both peer addresses translated per put (PeerAddr / PeerWord)
//   9  as 1, but the data moved by the library's out-of-line CopyBytes
#include "mori_shmem/mori_shmem_device.cuh"

using namespace mori::shmem;

namespace {

__device__ __forceinline__ unsigned long long ld_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ld_relaxed_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.sys.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long ld_volatile(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.volatile.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.gpu.b64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

template <int kVariant>
__device__ __forceinline__ void wait_at_least(const unsigned long long* signal, unsigned long long round) {
  if constexpr (kVariant == 2) {
    while (ld_relaxed_sys(signal) < round) {
    }
    detail::FenceAcqRelSys();
  } else if constexpr (kVariant == 4) {
    while (ld_volatile(signal) < round) {
    }
    detail::FenceAcqRelSys();
  } else if constexpr (kVariant == 5) {
    while (ld_acquire_gpu(signal) < round) {
    }
  } else {
    while (detail::LdAcquireSys(signal) < round) {
    }
  }
}

template <int kVariant>
__device__ __forceinline__ void put_signal(unsigned long long* peer_buf, const unsigned long long* buf,
                                           unsigned long long* peer_signal, unsigned long long round) {
  *reinterpret_cast<volatile unsigned long long*>(peer_buf) = *buf;
  if constexpr (kVariant == 3) {
    detail::FenceAcqRelSys();
    detail::StRelaxedSys(peer_signal, round);
  } else if constexpr (kVariant == 5) {
    st_release_gpu(peer_signal, round);
  } else {
    detail::StReleaseSys(peer_signal, round);
  }
}

template <int kVariant>
__device__ __forceinline__ void pingpong(const mori_shmem_device_state_t& st, char* buf, unsigned long long* signal,
                                         unsigned long long bytes, int peer, int iters, int initiator,
                                         unsigned long long* elapsed_ns) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  auto* peer_buf = static_cast<unsigned long long*>(ShmemPtrP2p(st, buf, peer));
  auto* peer_signal = static_cast<unsigned long long*>(ShmemPtrP2p(st, signal, peer));
  const auto* local = reinterpret_cast<const unsigned long long*>(buf);
  const unsigned long long start = detail::GlobalTimerNs();
  for (unsigned long long round = 1; round <= static_cast<unsigned long long>(iters); ++round) {
    if constexpr (kVariant == 0) {
      if (!initiator) ShmemWaitUntil(st, signal, SHMEM_CMP_GE, round);
      ShmemPutMemNbiSignalThread(st, buf, buf, bytes, signal, round, mori::core::SIGNAL_SET, peer);
      if (initiator) ShmemWaitUntil(st, signal, SHMEM_CMP_GE, round);
    } else if constexpr (kVariant == 6) {
      if (!initiator) wait_at_least<1>(signal, round);
      ShmemPutMemNbiSignalThread(st, buf, buf, bytes, signal, round, mori::core::SIGNAL_SET, peer);
      if (initiator) wait_at_least<1>(signal, round);
    } else if constexpr (kVariant == 8) {
      if (!initiator) wait_at_least<1>(signal, round);
      auto* d = reinterpret_cast<unsigned long long*>(detail::PeerAddr(st, buf, bytes, peer));
      auto* sig = reinterpret_cast<unsigned long long*>(detail::PeerWord(st, signal, 8, peer));
      *reinterpret_cast<volatile unsigned long long*>(d) = *local;
      detail::StReleaseSys(sig, round);
      if (initiator) wait_at_least<1>(signal, round);
    } else if constexpr (kVariant == 9) {
      if (!initiator) wait_at_least<1>(signal, round);
      detail::CopyBytes<8>(peer_buf, buf, bytes, 0, 1);
      detail::StReleaseSys(peer_signal, round);
      if (initiator) wait_at_least<1>(signal, round);
    } else if constexpr (kVariant == 7) {
      if (!initiator) ShmemWaitUntil(st, signal, SHMEM_CMP_GE, round);
      put_signal<1>(peer_buf, local, peer_signal, round);
      if (initiator) ShmemWaitUntil(st, signal, SHMEM_CMP_GE, round);
    } else {
      if (!initiator) wait_at_least<kVariant>(signal, round);
      put_signal<kVariant>(peer_buf, local, peer_signal, round);
      if (initiator) wait_at_least<kVariant>(signal, round);
    }
  }
  if (initiator) *elapsed_ns = detail::GlobalTimerNs() - start;
}

}  // namespace

#define MORI_LATENCY_VARIANT_(N)                                                                               \
  extern "C" __global__ void latency_variant_##N(const __grid_constant__ mori_shmem_device_state_t st, char* buf, \
                                                 unsigned long long* signal, unsigned long long bytes, int peer,  \
                                                 int iters, int initiator, unsigned long long* elapsed_ns) {      \
    pingpong<N>(st, buf, signal, bytes, peer, iters, initiator, elapsed_ns);                                     \
  }

MORI_LATENCY_VARIANT_(0)
MORI_LATENCY_VARIANT_(1)
MORI_LATENCY_VARIANT_(2)
MORI_LATENCY_VARIANT_(3)
MORI_LATENCY_VARIANT_(4)
MORI_LATENCY_VARIANT_(5)
MORI_LATENCY_VARIANT_(6)
MORI_LATENCY_VARIANT_(7)
MORI_LATENCY_VARIANT_(8)
MORI_LATENCY_VARIANT_(9)
