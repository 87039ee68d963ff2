/* SPDX-License-Identifier: MIT */
/*
 * The arguments of one collective call, shared by the cpu backend (src/host) and the CUDA kernels
 * (collectives.cu), which follow the same protocol (docs/user-guide/cco.md, "Collectives"):
 *
 *  1. stage:  each rank copies its input (or, with the fp8 wire, quantises it) into its own
 *             scratch buffer `scratch_offset + parity * scratch_half` of the communicator's slot,
 *             where parity = (epoch of LSA barrier `barrier_base + b`, before this call) & 1;
 *  2. arrive/wait on LSA barrier `barrier_base + b` (b = block index on the GPU, 0 on the cpu),
 *             so every peer's staged data is visible;
 *  3. read the peers' staged data through the flat VA and produce the output
 *             (two-shot all-reduce: reduce my slice into the second half of my scratch buffer,
 *             barrier again, then gather the reduced slices).
 *
 * There is no closing barrier: calls alternate between two scratch buffers, and a rank that passed
 * call k+1's barrier knows every peer finished reading call k's buffer. The parity comes from the
 * barrier's epoch, which every call advances by one, rather than from the host, so a CUDA graph
 * replaying one captured call still alternates. On the GPU
 * block b of every rank handles the same elements in every call (a fixed grid per communicator),
 * which keeps that argument true per block.
 */
#ifndef MORI_CCO_COLLECTIVE_ARGS_H_
#define MORI_CCO_COLLECTIVE_ARGS_H_

#include "mori_cco/dev_comm.h"

#define MORI_CCO_COLLECTIVE_ARGS_VERSION 1

/* Element types. */
#define MORI_CCO_DTYPE_FLOAT32 0
#define MORI_CCO_DTYPE_BFLOAT16 1
#define MORI_CCO_DTYPE_FLOAT16 2
#define MORI_CCO_DTYPE_INT32 3
#define MORI_CCO_DTYPE_INT64 4
#define MORI_CCO_DTYPE_UINT8 5 /* byte copies (all-gather / all-to-all of any dtype) */

/* Reductions. */
#define MORI_CCO_OP_SUM 0
#define MORI_CCO_OP_MAX 1
#define MORI_CCO_OP_MIN 2

/* Kinds of call. */
#define MORI_CCO_ALL_REDUCE_ONE_SHOT 0
#define MORI_CCO_ALL_REDUCE_TWO_SHOT 1
#define MORI_CCO_ALL_GATHER 2
#define MORI_CCO_ALL_TO_ALL 3

/* Wire formats of the all-reduce. FP8: e4m3 (OCP, max 448) with one float32 scale per block of
 * MORI_CCO_FP8_BLOCK elements = amax/448; the sum is accumulated in float32. */
#define MORI_CCO_WIRE_NATIVE 0
#define MORI_CCO_WIRE_FP8 1
#define MORI_CCO_FP8_BLOCK 128

typedef struct {
  mori_cco_dev_comm_t comm;
  uint64_t input;        /* local address of this rank's input */
  uint64_t output;       /* local address of this rank's output */
  uint64_t count;        /* all-reduce: elements of input and output; all-gather / all-to-all:
                            elements per rank (input holds count, all-to-all: count per peer) */
  uint64_t scratch_offset; /* offset of the scratch area inside every slot */
  uint64_t scratch_half;   /* bytes of each of its two buffers */
  int32_t kind;          /* MORI_CCO_ALL_REDUCE_* / ALL_GATHER / ALL_TO_ALL */
  int32_t dtype;         /* MORI_CCO_DTYPE_* */
  int32_t op;            /* MORI_CCO_OP_* */
  int32_t wire;          /* MORI_CCO_WIRE_* */
  uint32_t reserved;     /* 0 */
  uint32_t barrier_base; /* first LSA barrier of this call's blocks */
} mori_cco_collective_args_t;

/* ---- scratch layout (one buffer; every region 256-byte aligned) ----
 * staged:   native: count elements of the input;  fp8: count e4m3 codes, then the float32 scales
 * reduced:  two-shot only, right after staged: count elements in the output dtype, of which this
 *           rank fills its slice
 * Two-shot slices: slice s is elements [s * L, min(count, (s + 1) * L)) with
 * L = ceil(count / world) rounded up to a whole fp8 block. */
#if defined(__CUDACC__)
#define MORI_CCO_INLINE __host__ __device__ static inline
#else
#define MORI_CCO_INLINE static inline
#endif

MORI_CCO_INLINE uint64_t mori_cco_align(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
MORI_CCO_INLINE uint64_t mori_cco_fp8_scales_offset(uint64_t n) { return mori_cco_align(n, 256); }
MORI_CCO_INLINE uint64_t mori_cco_fp8_blocks(uint64_t n) { return (n + MORI_CCO_FP8_BLOCK - 1) / MORI_CCO_FP8_BLOCK; }
MORI_CCO_INLINE uint64_t mori_cco_staged_bytes(uint64_t n, uint64_t elem_size, int32_t wire) {
  return wire == MORI_CCO_WIRE_FP8 ? mori_cco_fp8_scales_offset(n) + mori_cco_align(mori_cco_fp8_blocks(n) * 4, 256)
                                   : mori_cco_align(n * elem_size, 256);
}
MORI_CCO_INLINE uint64_t mori_cco_slice_len(uint64_t n, int32_t world) {
  return mori_cco_align((n + (uint64_t)world - 1) / (uint64_t)world, MORI_CCO_FP8_BLOCK);
}
/* Bytes one scratch buffer needs for a call (count and elem_size as in the args). */
MORI_CCO_INLINE uint64_t mori_cco_scratch_bytes(int32_t kind, uint64_t count, uint64_t elem_size, int32_t world,
                                                int32_t wire) {
  switch (kind) {
    case MORI_CCO_ALL_REDUCE_ONE_SHOT:
      return mori_cco_staged_bytes(count, elem_size, wire);
    case MORI_CCO_ALL_REDUCE_TWO_SHOT:
      return mori_cco_staged_bytes(count, elem_size, wire) + mori_cco_align(count * elem_size, 256);
    case MORI_CCO_ALL_GATHER:
      return mori_cco_align(count * elem_size, 256);
    default: /* MORI_CCO_ALL_TO_ALL */
      return mori_cco_align(count * (uint64_t)world * elem_size, 256);
  }
}

#endif /* MORI_CCO_COLLECTIVE_ARGS_H_ */
