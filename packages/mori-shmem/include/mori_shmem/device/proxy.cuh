// SPDX-License-Identifier: MIT
// The device half of NOTE [device proxy] (mori_shmem/proxy_ring.h): how calls reach a PE whose
// heap this PE cannot load/store. One thread of the calling group posts one request for the
// group's whole range; the PE's proxy thread carries it out over the remote transport.
//
// Semantics kept: a put (nbi or not) waits until the proxy has taken the source bytes, so the
// source may be reused when the call returns; it is complete at the target after a quiet, which
// waits for the proxy to complete every earlier request at its target. A put-with-signal travels
// as one request, its signal applied after its data. Gets and fetching atomics wait for their
// answer. Fence is a quiet here (the network path has no cheaper ordering).
// Posting is bounded by MORI_SHMEM_DEVICE_SPIN_TIMEOUT like every device spin.
#pragma once

#include "../proxy_ring.h"
#include "ptx.cuh"
#include "state.cuh"

namespace mori::shmem::detail {

// Whether a call naming pe goes through the proxy: pe is another PE, and not load/store reachable.
// Kernels that only ever run among load/store peers may compile the proxy out with
// -DMORI_SHMEM_DISABLE_DEVICE_PROXY (calls to other PEs then record ERR_UNREACHABLE_PE).
__device__ __forceinline__ bool ViaProxy(const ShmemDeviceState& st, int pe) {
#ifdef MORI_SHMEM_DISABLE_DEVICE_PROXY
  (void)st;
  (void)pe;
  return false;
#else
  return st.proxy_ring != 0 && static_cast<unsigned int>(pe) < static_cast<unsigned int>(st.n_pes) &&
         pe != st.my_pe && PeerBase(st, pe) == 0;
#endif
}

__device__ __forceinline__ bool HasProxy(const ShmemDeviceState& st) {
#ifdef MORI_SHMEM_DISABLE_DEVICE_PROXY
  (void)st;
  return false;
#else
  return st.proxy_ring != 0;
#endif
}

// What the proxy functions need of the state. The out-of-line ones take it as four scalars (see
// MORI_SHMEM_PROXY_CTX): a noinline function taking the state by reference would make callers
// spill their by-value kernel argument (see RecordError), and an aggregate passed by value trips
// some LLVM NVPTX back ends (Triton's among them) at code generation.
struct ProxyCtx {
  unsigned long long ring;
  unsigned long long heapBase;
  unsigned long long heapSize;
  unsigned long long spinTimeoutNs;
};

#define MORI_SHMEM_PROXY_PARAMS                                                                     \
  unsigned long long ctxRing, unsigned long long ctxHeapBase, unsigned long long ctxHeapSize, \
      unsigned long long ctxSpinTimeoutNs
#define MORI_SHMEM_PROXY_CTX const ProxyCtx ctx{ctxRing, ctxHeapBase, ctxHeapSize, ctxSpinTimeoutNs}
#define MORI_SHMEM_PROXY_ARGS(st) (st).proxy_ring, (st).heap_base, (st).heap_size, (st).spin_timeout_ns

// How long a waiting thread naps between two looks at the proxy's words once it has waited 20 us
// (-DMORI_SHMEM_PROXY_POLL_NS=... to A/B).
#ifndef MORI_SHMEM_PROXY_POLL_NS
#define MORI_SHMEM_PROXY_POLL_NS 256
#endif

// Spins until done() holds; false after recording ERR_WAIT_TIMEOUT.
template <typename Done>
__device__ __forceinline__ bool ProxySpin(const ProxyCtx& ctx, Done done) {
  if (done()) return true;
  const unsigned long long start = GlobalTimerNs();
  for (unsigned int spin = 1;; ++spin) {
    if (done()) return true;
    if (spin % 16 == 0) {
      const unsigned long long waited = GlobalTimerNs() - start;
      if (ctx.spinTimeoutNs != 0 && waited >= ctx.spinTimeoutNs) {
        RecordError(ctx.heapBase, MORI_SHMEM_DEVICE_ERR_WAIT_TIMEOUT);
        return false;
      }
      if (waited >= 20000) __nanosleep(MORI_SHMEM_PROXY_POLL_NS);
    }
  }
}

// The heap offset of the symmetric range [addr, addr + bytes), naturally aligned to `align`; false
// after recording ERR_BAD_ADDRESS.
__device__ __forceinline__ bool ProxyOffset(const ProxyCtx& ctx, const void* addr, unsigned long long bytes,
                                            unsigned int align, unsigned long long* offset) {
  const unsigned long long off = reinterpret_cast<unsigned long long>(addr) - ctx.heapBase;
  if (off >= ctx.heapSize || bytes > ctx.heapSize - off || (off & (align - 1)) != 0) {
    RecordError(ctx.heapBase, MORI_SHMEM_DEVICE_ERR_BAD_ADDRESS);
    return false;
  }
  *offset = off;
  return true;
}

constexpr unsigned long long kNoTicket = ~0ull;

// What a request needs of the ring's header: the head and done words to poll (the proxy's copy in
// GPU memory, see proxy_ring.h for why, or the ring's own under a library that keeps none) and the
// features the proxy serves. Both in one 16-byte load, since each load of the ring crosses PCIe: a
// caller takes it before its ticket, so the two overlap, and hands it to ProxyPost and ProxyWaitDone.
struct ProxyHead {
  const mori_shmem_proxy_words_t* words;
  unsigned long long features;
};

__device__ __forceinline__ ProxyHead ProxyHeadOf(const ProxyCtx& ctx) {
  auto* ring = reinterpret_cast<mori_shmem_proxy_ring_t*>(ctx.ring);
  // device_words and features are one aligned 16-byte pair (checked where the proxy builds the ring).
  unsigned long long words, features;
  LdVolatilePair(&ring->device_words, &words, &features);
  return {words != 0 ? reinterpret_cast<const mori_shmem_proxy_words_t*>(words)
                     : reinterpret_cast<const mori_shmem_proxy_words_t*>(&ring->head),
          features};
}

// Takes a ticket, waits for its slot, writes the request (with `inlineBytes` bytes of `inlineSrc`
// as its payload, at most MORI_SHMEM_PROXY_INLINE_BYTES) and publishes it.
__device__ __forceinline__ unsigned long long ProxyPost(const ProxyCtx& ctx, const ProxyHead& head, unsigned int op,
                                                        int pe, int amo, unsigned int type, unsigned long long local,
                                                        unsigned long long offset, unsigned long long bytes,
                                                        unsigned long long value, unsigned long long compare,
                                                        unsigned long long signalOffset,
                                                        const unsigned char* inlineSrc = nullptr,
                                                        unsigned int inlineBytes = 0) {
  auto* ring = reinterpret_cast<mori_shmem_proxy_ring_t*>(ctx.ring);
  auto* tail = reinterpret_cast<unsigned long long*>(ctx.heapBase + MORI_SHMEM_SYNC_PROXY_TAIL_OFFSET);
  const unsigned long long ticket = atomicAdd_system(tail, 1ull);
  if (!ProxySpin(ctx, [&] { return ticket - LdAcquireSys(&head.words->head) < MORI_SHMEM_PROXY_RING_ENTRIES; })) {
    return kNoTicket;
  }
  mori_shmem_proxy_entry_t* e = &ring->entries[ticket % MORI_SHMEM_PROXY_RING_ENTRIES];
  e->op = op;
  e->pe = pe;
  e->amo = amo;
  e->type = type;
  e->local = local;
  e->offset = offset;
  e->bytes = bytes;
  e->value = value;
  e->compare = compare;
  e->signal_offset = signalOffset;
  // Whole words, assembled from bytes: the source may have any alignment, and each store crosses PCIe.
  for (unsigned int word = 0; word * 8 < inlineBytes; ++word) {
    unsigned long long bits = 0;
    for (unsigned int b = 0; b < 8 && word * 8 + b < inlineBytes; ++b) {
      bits |= static_cast<unsigned long long>(inlineSrc[word * 8 + b]) << (8 * b);
    }
    e->payload[word] = bits;
  }
  StReleaseSys(&e->state, ticket + 1);  // after the fields, for the proxy's acquire
  return ticket;
}

// Waits until the proxy has carried out `ticket` (and every earlier request).
__device__ __forceinline__ void ProxyWaitDone(const ProxyCtx& ctx, const ProxyHead& head, unsigned long long ticket) {
  if (ticket == kNoTicket) return;
  ProxySpin(ctx, [&] { return LdAcquireSys(&head.words->done) > ticket; });
}

// The same, reading the ring's header themselves (for callers that post once, such as mori-cco's GDA).
__device__ __forceinline__ unsigned long long ProxyPost(const ProxyCtx& ctx, unsigned int op, int pe, int amo,
                                                        unsigned int type, unsigned long long local,
                                                        unsigned long long offset, unsigned long long bytes,
                                                        unsigned long long value, unsigned long long compare,
                                                        unsigned long long signalOffset) {
  return ProxyPost(ctx, ProxyHeadOf(ctx), op, pe, amo, type, local, offset, bytes, value, compare, signalOffset);
}
__device__ __forceinline__ void ProxyWaitDone(const ProxyCtx& ctx, unsigned long long ticket) {
  if (ticket != kNoTicket) ProxyWaitDone(ctx, ProxyHeadOf(ctx), ticket);
}

// Puts or gets [symmetric, +bytes) of pe, from or into local memory; returns when the proxy has
// the source bytes (put) or when the bytes are here (get).
__device__ inline __noinline__ void ProxyTransfer(MORI_SHMEM_PROXY_PARAMS, unsigned int op, const void* symmetric,
                                                  const void* local, unsigned long long bytes, int pe) {
  MORI_SHMEM_PROXY_CTX;
  const ProxyHead head = ProxyHeadOf(ctx);
  unsigned long long offset;
  if (!ProxyOffset(ctx, symmetric, bytes, 1, &offset)) return;
  ProxyWaitDone(ctx, head,
                ProxyPost(ctx, head, op, pe, 0, 0, reinterpret_cast<unsigned long long>(local), offset, bytes, 0, 0, 0));
}

// A 4- or 8-byte word of pe gets `bits` by amo (SIGNAL_SET/ADD, AMO_*). No answer is awaited.
__device__ inline __noinline__ void ProxyAmo(MORI_SHMEM_PROXY_PARAMS, const void* symmetric, unsigned int width,
                                             unsigned long long bits, int amo, int pe) {
  MORI_SHMEM_PROXY_CTX;
  unsigned long long offset;
  if (!ProxyOffset(ctx, symmetric, width, width, &offset)) return;
  ProxyPost(ctx, MORI_SHMEM_PROXY_AMO, pe, amo, width == 4 ? 1u : 3u, 0, offset, width, bits, 0, 0);
}

// A fetching atomic: waits until done passes its ticket (the answer is in the slot by then, so the
// look at the slot's state succeeds at once), reads the answer, then frees the slot.
__device__ inline __noinline__ unsigned long long ProxyAmoFetch(MORI_SHMEM_PROXY_PARAMS, const void* symmetric,
                                                                unsigned int width, unsigned long long bits,
                                                                unsigned long long compare, int amo, int pe) {
  MORI_SHMEM_PROXY_CTX;
  unsigned long long offset;
  const ProxyHead head = ProxyHeadOf(ctx);
  if (!ProxyOffset(ctx, symmetric, width, width, &offset)) return 0;
  const unsigned long long ticket = ProxyPost(ctx, head, MORI_SHMEM_PROXY_AMO_FETCH, pe, amo, width == 4 ? 1u : 3u, 0,
                                              offset, width, bits, compare, 0);
  if (ticket == kNoTicket) return 0;
  auto* ring = reinterpret_cast<mori_shmem_proxy_ring_t*>(ctx.ring);
  mori_shmem_proxy_entry_t* e = &ring->entries[ticket % MORI_SHMEM_PROXY_RING_ENTRIES];
  if (!ProxySpin(ctx, [&] { return LdAcquireSys(&head.words->done) > ticket; }) ||
      !ProxySpin(ctx, [&] { return LdAcquireSys(&e->state) == (MORI_SHMEM_PROXY_ANSWERED | ticket); })) {
    return 0;
  }
  const unsigned long long answer = *reinterpret_cast<volatile unsigned long long*>(&e->answer);
  StReleaseSys(&e->state, 0ull);
  return answer;
}

__device__ inline __noinline__ void ProxyPutSignal(MORI_SHMEM_PROXY_PARAMS, void* dest, const void* src,
                                                   unsigned long long bytes, const void* sigDest,
                                                   unsigned long long sigVal, int sigOp, int pe) {
  MORI_SHMEM_PROXY_CTX;
  const ProxyHead head = ProxyHeadOf(ctx);
  unsigned long long offset, signalOffset;
  if (!ProxyOffset(ctx, dest, bytes, 1, &offset) || !ProxyOffset(ctx, sigDest, 8, 8, &signalOffset)) return;
  // The device API also takes AMO_SET / AMO_ADD as signal ops; the wire knows the SIGNAL_ spelling.
  if (sigOp == core::AMO_SET) sigOp = core::SIGNAL_SET;
  if (sigOp == core::AMO_ADD) sigOp = core::SIGNAL_ADD;
  // A small payload travels in the entry (proxy_ring.h), so the source is free once posted. Built
  // with -DMORI_SHMEM_PROXY_INLINE_LIMIT=0, every payload is staged (to A/B the two).
#ifndef MORI_SHMEM_PROXY_INLINE_LIMIT
#define MORI_SHMEM_PROXY_INLINE_LIMIT MORI_SHMEM_PROXY_INLINE_BYTES
#endif
  static_assert(MORI_SHMEM_PROXY_INLINE_LIMIT <= MORI_SHMEM_PROXY_INLINE_BYTES, "the entry holds no more");
  if (bytes <= MORI_SHMEM_PROXY_INLINE_LIMIT && (head.features & MORI_SHMEM_PROXY_FEATURE_INLINE)) {
    ProxyPost(ctx, head, MORI_SHMEM_PROXY_PUT_SIGNAL_INLINE, pe, sigOp, 0, 0, offset, bytes, sigVal, 0, signalOffset,
              static_cast<const unsigned char*>(src), static_cast<unsigned int>(bytes));
    return;
  }
  ProxyWaitDone(ctx, head,
                ProxyPost(ctx, head, MORI_SHMEM_PROXY_PUT_SIGNAL, pe, sigOp, 0,
                          reinterpret_cast<unsigned long long>(src), offset, bytes, sigVal, 0, signalOffset));
}

__device__ inline __noinline__ void ProxyPutImm(MORI_SHMEM_PROXY_PARAMS, void* dest, unsigned long long bits,
                                                unsigned int bytes, int pe) {
  MORI_SHMEM_PROXY_CTX;
  unsigned long long offset;
  if (!ProxyOffset(ctx, dest, bytes, bytes, &offset)) return;
  ProxyPost(ctx, MORI_SHMEM_PROXY_PUT_IMM, pe, 0, 0, 0, offset, bytes, bits, 0, 0);
}

// Every request this PE posted before is complete at its target when this returns.
__device__ inline __noinline__ void ProxyQuiet(MORI_SHMEM_PROXY_PARAMS, int myPe) {
  MORI_SHMEM_PROXY_CTX;
  const ProxyHead head = ProxyHeadOf(ctx);
  ProxyWaitDone(ctx, head, ProxyPost(ctx, head, MORI_SHMEM_PROXY_QUIET, myPe, 0, 0, 0, 0, 0, 0, 0, 0));
}

}  // namespace mori::shmem::detail
