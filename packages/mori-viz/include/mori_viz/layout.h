/* SPDX-License-Identifier: MIT */
/*
 * The byte layout of a mori-viz trace buffer, shared by the device writer (trace.cuh), the host
 * reader (mori/viz/layout.py mirrors it field for field) and anything else that parses a buffer.
 * Plain C types only: NVRTC has no host headers, and a C compiler must accept this file too.
 * Any change to the layout bumps MORI_VIZ_LAYOUT_VERSION.
 *
 *   [0, 64)                         mori_viz_header_t, written by the host when it allocates
 *   [64, 64 + 16 * num_warps)       mori_viz_warp_header_t per warp slot
 *   [.., .. + 16 * num_warps * E)   mori_viz_event_t ring per warp slot, E = events_per_warp
 *
 * All fields are little-endian (every CUDA GPU and host mori runs on).
 */
#ifndef MORI_VIZ_LAYOUT_H_
#define MORI_VIZ_LAYOUT_H_

#define MORI_VIZ_LAYOUT_VERSION 1u
/* "MORIVIZ1" read as a little-endian u64. */
#define MORI_VIZ_MAGIC 0x315A495649524F4DULL
#define MORI_VIZ_HEADER_BYTES 64u
#define MORI_VIZ_WARP_HEADER_BYTES 16u
#define MORI_VIZ_EVENT_BYTES 16u

/* Event kinds (mori_viz_event_t.kind). 0 is never written, so a zeroed record is recognisably
 * not an event. */
#define MORI_VIZ_EVENT_BEGIN 1u
#define MORI_VIZ_EVENT_END 2u
#define MORI_VIZ_EVENT_INSTANT 3u

typedef struct mori_viz_header {
  unsigned long long magic;         /* MORI_VIZ_MAGIC */
  unsigned int version;             /* MORI_VIZ_LAYOUT_VERSION */
  unsigned int header_bytes;        /* MORI_VIZ_HEADER_BYTES */
  unsigned int num_warps;           /* warp slots; a warp whose slot is >= this records nothing */
  unsigned int events_per_warp;     /* ring length per warp slot, a power of two */
  int pe;                           /* the PE (rank) this buffer belongs to */
  unsigned int flags;               /* reserved, 0 */
  unsigned int dropped_warps;       /* device: warps that started with a slot >= num_warps */
  unsigned int reserved0;
  unsigned long long reserved1[3];
} mori_viz_header_t;

typedef struct mori_viz_warp_header {
  unsigned int block;               /* linear block index of the warp that last used this slot */
  unsigned short warp;              /* its warp index inside the block */
  unsigned short smid;              /* the SM it ran on (%smid) */
  unsigned int count;               /* events ever recorded in this slot (the ring keeps the last
                                       events_per_warp); kept across launches, zeroed by a reset */
  unsigned int table_id;            /* fingerprint of the slot table the kernel was built with, 0 = none */
} mori_viz_warp_header_t;

typedef struct mori_viz_event {
  unsigned long long timestamp_ns;  /* %globaltimer: nanoseconds, comparable across SMs of one GPU */
  unsigned short slot;              /* trace slot id (from the slot table) */
  unsigned char kind;               /* MORI_VIZ_EVENT_* */
  unsigned char reserved;
  unsigned int arg;                 /* a caller's payload (a count, an iteration), 0 if none */
} mori_viz_event_t;

/* Compile-time layout checks that work in C and C++ without static_assert. */
typedef char mori_viz_check_header_size[(sizeof(mori_viz_header_t) == MORI_VIZ_HEADER_BYTES) ? 1 : -1];
typedef char mori_viz_check_warp_size[(sizeof(mori_viz_warp_header_t) == MORI_VIZ_WARP_HEADER_BYTES) ? 1 : -1];
typedef char mori_viz_check_event_size[(sizeof(mori_viz_event_t) == MORI_VIZ_EVENT_BYTES) ? 1 : -1];

#endif /* MORI_VIZ_LAYOUT_H_ */
