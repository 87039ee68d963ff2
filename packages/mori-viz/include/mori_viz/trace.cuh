// SPDX-License-Identifier: MIT
// mori-viz device trace points: per-warp begin/end/instant events stamped with %globaltimer,
// written by lane 0 of each warp into a trace buffer laid out as mori_viz/layout.h says.
//
// Everything here compiles to nothing unless MORI_VIZ_ENABLED is defined to a nonzero value (the
// JIT define mori.viz.jit_defines() returns when MORI_ENABLE_PROFILER is set): the macros expand
// to ((void)0) and never evaluate their arguments, so a disabled build reads no timer, stores
// nothing and need not even have a buffer.
//
//   __global__ void k(void* trace, ...) {
//     MORI_VIZ_INIT(viz, trace, MY_SLOT_TABLE_ID);   // once per thread, warp-uniform
//     MORI_VIZ_BEGIN(viz, MY_SLOT_PHASE_A);
//     ...
//     MORI_VIZ_END(viz, MY_SLOT_PHASE_A);
//     { MORI_VIZ_SCOPE(viz, MY_SLOT_PHASE_B); ... }  // C++ scope: begin here, end at the brace
//     MORI_VIZ_INSTANT_ARG(viz, MY_SLOT_DONE, n);
//   }
//
// Rules: call every macro from code all 32 lanes of the warp reach together (lane 0 writes, and
// every lane keeps the same event count); a warp slot belongs to one warp at a time, so kernels
// that run concurrently on one buffer must use disjoint slots (MORI_VIZ_INIT_WARP). Plain C types
// and no host headers, so NVRTC compiles it.
#ifndef MORI_VIZ_TRACE_CUH_
#define MORI_VIZ_TRACE_CUH_

#include "mori_viz/layout.h"

#define MORI_VIZ_CAT_(a, b) a##b
#define MORI_VIZ_CAT(a, b) MORI_VIZ_CAT_(a, b)

#if defined(MORI_VIZ_ENABLED) && MORI_VIZ_ENABLED

// A warp's view of the buffer. Every lane holds a copy; only lane 0 writes.
typedef struct mori_viz_warp {
  unsigned long long* events;  // this slot's ring: events_per_warp records of two u64
  unsigned int* count_word;    // this slot's mori_viz_warp_header_t.count
  unsigned int count;          // events recorded so far (loaded at init, then counted locally)
  unsigned int mask;           // events_per_warp - 1 (a power of two, so the ring index is a mask)
  int writer;                  // nonzero on lane 0 of a warp that has a slot
} mori_viz_warp_t;

static __device__ __forceinline__ unsigned long long mori_viz_now(void) {
  unsigned long long t;
  // "memory": keep the stamp in program order with the loads and stores being timed.
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}

static __device__ __forceinline__ unsigned int mori_viz_smid(void) {
  unsigned int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

static __device__ __forceinline__ unsigned int mori_viz_thread_in_block(void) {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

static __device__ __forceinline__ unsigned int mori_viz_block_linear(void) {
  return blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
}

// The default warp slot: warps numbered block by block, so slot = block * warps_per_block + warp.
static __device__ __forceinline__ unsigned int mori_viz_default_warp_slot(void) {
  const unsigned int warps_per_block = (blockDim.x * blockDim.y * blockDim.z + 31u) / 32u;
  return mori_viz_block_linear() * warps_per_block + mori_viz_thread_in_block() / 32u;
}

static __device__ __forceinline__ mori_viz_warp_t mori_viz_warp_init(void* buffer, unsigned int table_id,
                                                                    unsigned int warp_slot) {
  mori_viz_warp_t w;
  w.events = 0;
  w.count_word = 0;
  w.count = 0u;
  w.mask = 0u;
  w.writer = 0;
  if (buffer == 0) return w;  // compiled in, but this launch was given no buffer
  unsigned char* base = (unsigned char*)buffer;
  mori_viz_header_t* header = (mori_viz_header_t*)base;
  const unsigned int lane = mori_viz_thread_in_block() & 31u;
  const unsigned int num_warps = header->num_warps;
  if (warp_slot >= num_warps) {
    // Counted, not silently lost: the reader reports how many warps had no room.
    if (lane == 0u) atomicAdd(&header->dropped_warps, 1u);
    return w;
  }
  const unsigned int events_per_warp = header->events_per_warp;
  mori_viz_warp_header_t* slot = (mori_viz_warp_header_t*)(base + MORI_VIZ_HEADER_BYTES) + warp_slot;
  w.count_word = &slot->count;
  w.count = slot->count;  // continues after earlier launches, so they are not overwritten
  w.mask = events_per_warp - 1u;
  w.events = (unsigned long long*)(base + MORI_VIZ_HEADER_BYTES + (unsigned long long)num_warps * MORI_VIZ_WARP_HEADER_BYTES) +
             2ull * events_per_warp * warp_slot;
  w.writer = lane == 0u;
  if (w.writer) {
    slot->block = mori_viz_block_linear();
    slot->warp = (unsigned short)(mori_viz_thread_in_block() / 32u);
    slot->smid = (unsigned short)mori_viz_smid();
    slot->table_id = table_id;
  }
  return w;
}

static __device__ __forceinline__ void mori_viz_record(mori_viz_warp_t* w, unsigned int slot, unsigned int kind,
                                                       unsigned int arg) {
  if (w->writer) {
    const unsigned long long stamp = mori_viz_now();
    const unsigned long long meta =
        (unsigned long long)(slot & 0xffffu) | ((unsigned long long)kind << 16) | ((unsigned long long)arg << 32);
    // One 16-byte store for the record, one 4-byte store for the count: no atomics, no waits.
    // Spelled as st.global because the pointers come from a void* the compiler cannot place.
    asm volatile("st.global.v2.u64 [%0], {%1, %2};" ::"l"(w->events + 2u * (w->count & w->mask)), "l"(stamp),
                 "l"(meta));
    asm volatile("st.global.u32 [%0], %1;" ::"l"(w->count_word), "r"(w->count + 1u));
  }
  w->count += 1u;
}

#ifdef __cplusplus
// Begin at construction, end at the end of the enclosing scope (early returns included).
struct mori_viz_scope {
  mori_viz_warp_t* warp;
  unsigned int slot;
  __device__ __forceinline__ mori_viz_scope(mori_viz_warp_t* w, unsigned int s) : warp(w), slot(s) {
    mori_viz_record(warp, slot, MORI_VIZ_EVENT_BEGIN, 0u);
  }
  __device__ __forceinline__ ~mori_viz_scope() { mori_viz_record(warp, slot, MORI_VIZ_EVENT_END, 0u); }
};
#define MORI_VIZ_SCOPE(ctx, slot) mori_viz_scope MORI_VIZ_CAT(mori_viz_scope_, __LINE__)(&(ctx), (slot))
#endif

#define MORI_VIZ_INIT(ctx, buffer, table_id) \
  mori_viz_warp_t ctx = mori_viz_warp_init((void*)(buffer), (table_id), mori_viz_default_warp_slot())
#define MORI_VIZ_INIT_WARP(ctx, buffer, table_id, warp_slot) \
  mori_viz_warp_t ctx = mori_viz_warp_init((void*)(buffer), (table_id), (warp_slot))
#define MORI_VIZ_BEGIN(ctx, slot) mori_viz_record(&(ctx), (slot), MORI_VIZ_EVENT_BEGIN, 0u)
#define MORI_VIZ_END(ctx, slot) mori_viz_record(&(ctx), (slot), MORI_VIZ_EVENT_END, 0u)
#define MORI_VIZ_INSTANT(ctx, slot) mori_viz_record(&(ctx), (slot), MORI_VIZ_EVENT_INSTANT, 0u)
#define MORI_VIZ_BEGIN_ARG(ctx, slot, arg) mori_viz_record(&(ctx), (slot), MORI_VIZ_EVENT_BEGIN, (unsigned int)(arg))
#define MORI_VIZ_END_ARG(ctx, slot, arg) mori_viz_record(&(ctx), (slot), MORI_VIZ_EVENT_END, (unsigned int)(arg))
#define MORI_VIZ_INSTANT_ARG(ctx, slot, arg) \
  mori_viz_record(&(ctx), (slot), MORI_VIZ_EVENT_INSTANT, (unsigned int)(arg))
#define MORI_VIZ_ONLY(...) __VA_ARGS__

#else  // profiling disabled

/* BEGIN MORI_VIZ_STUBS: mori.viz.codegen copies this block into generated slot headers, so a
   kernel built without profiling compiles even where mori-viz is not installed. */
#ifndef MORI_VIZ_STUBS_DEFINED
#define MORI_VIZ_STUBS_DEFINED 1
#define MORI_VIZ_INIT(ctx, buffer, table_id) ((void)0)
#define MORI_VIZ_INIT_WARP(ctx, buffer, table_id, warp_slot) ((void)0)
#define MORI_VIZ_BEGIN(ctx, slot) ((void)0)
#define MORI_VIZ_END(ctx, slot) ((void)0)
#define MORI_VIZ_INSTANT(ctx, slot) ((void)0)
#define MORI_VIZ_BEGIN_ARG(ctx, slot, arg) ((void)0)
#define MORI_VIZ_END_ARG(ctx, slot, arg) ((void)0)
#define MORI_VIZ_INSTANT_ARG(ctx, slot, arg) ((void)0)
#define MORI_VIZ_SCOPE(ctx, slot) ((void)0)
#define MORI_VIZ_ONLY(...)
#endif
/* END MORI_VIZ_STUBS */

#endif  // MORI_VIZ_ENABLED

#endif  // MORI_VIZ_TRACE_CUH_
