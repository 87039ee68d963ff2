/* SPDX-License-Identifier: MIT */
/*
 * What one dispatch or combine needs to know, as one plain C struct that the host C++ of the cpu
 * backend and the CUDA kernels of the cuda backend both compile (NVRTC has no host headers, hence
 * plain C types). Python fills it (mori/ep/layout.py mirrors it field for field); any layout change
 * bumps MORI_EP_ARGS_VERSION.
 *
 * Every PE owns one "region" of the symmetric heap, at the same offset on every PE. It starts with
 * the control words below, then the token buffers at the offsets the struct carries.
 */
#ifndef MORI_EP_ARGS_H_
#define MORI_EP_ARGS_H_

#define MORI_EP_ARGS_VERSION 3

/* Control words, as byte offsets from the start of a region. */
#define MORI_EP_CTRL_RECV_OFFSET 0      /* u32: next free receive slot; senders reserve runs with atomics */
#define MORI_EP_CTRL_ERROR 4            /* u32: first error of this PE (codes below); the host reads it */
#define MORI_EP_CTRL_DISPATCH_ARRIVE 8  /* u32: blocks of this PE's dispatch that finished sending */
#define MORI_EP_CTRL_COMBINE_ARRIVE 12  /* u32: blocks of this PE's combine that finished staging */
#define MORI_EP_CTRL_COMBINE_CALLS 16   /* u64: combines this PE completed (the barrier's epoch) */
#define MORI_EP_CTRL_TOTAL_RECV 24      /* i32: rows received by the last dispatch */
#define MORI_EP_CTRL_SIGNALS 64         /* u32[world]: sender q stores (rows sent to us + 1) at [q] */
#define MORI_EP_CTRL_SENT 1088          /* u32[world]: rows this PE's current dispatch sent to each PE */
#define MORI_EP_CTRL_BARRIER 2112       /* u64[world]: combines PE q entered, added by q at [q] */
/* Inter-node kernel types (src/cpu/net.cpp): 64-bit words indexed by routing node. A signal holds
 * (call number << 32) | rows, so it never needs a reset across the network. */
#define MORI_EP_CTRL_NET_HOP_SIGNAL 4352   /* u64[nodes]: a batch of dispatch records from node n arrived */
#define MORI_EP_CTRL_NET_HOP_ACK 5376      /* u64[nodes]: node m's proxy forwarded our batch of call c (= c) */
#define MORI_EP_CTRL_NET_REPLY_SIGNAL 6400 /* u64[nodes]: node m's combine replies arrived */
#define MORI_EP_CTRL_NET_SEND_COUNT 7424   /* u32[nodes]: records packed for node m by this call */
#define MORI_EP_CTRL_NET_DISPATCH_CALLS 7936 /* u64: dispatches of this op (the call number of signals) */
#define MORI_EP_CTRL_NET_SEND_DONE 8192    /* u32[nodes]: kernel blocks that finished their slice of a batch */
#define MORI_EP_CTRL_BYTES 8704
#define MORI_EP_MAX_WORLD_SIZE 128      /* the control arrays above hold this many PEs */
#define MORI_EP_MAX_TOPK 32             /* one lane of a warp per pick */

/* Values of the error word. */
#define MORI_EP_OK 0
#define MORI_EP_ERR_TIMEOUT 1           /* a wait for a peer expired */
#define MORI_EP_ERR_RECV_OVERFLOW 2     /* more rows arrived than max_total_recv_tokens leaves room for */
#define MORI_EP_ERR_BAD_EXPERT 3        /* an expert id >= world_size * num_experts_per_rank */
#define MORI_EP_ERR_SHORT_INPUT 4       /* combine: the external input has fewer rows than were received */

/* Bits of flags. */
#define MORI_EP_HAS_WEIGHTS 1
#define MORI_EP_HAS_SCALES 2
#define MORI_EP_EXTERNAL_INPUT 4        /* combine: copy `input` into the registered buffer first */
#define MORI_EP_REPLAY 8                /* dispatch: send to the slots already in the dest map (a routing
                                           handle's), reserving nothing */
#define MORI_EP_FORWARD 16              /* dispatch: the rows are the records of the net hop buffer (an
                                           inter-node proxy fanning them out to its node's PEs) */

/* Combine wire formats (quant). */
#define MORI_EP_QUANT_NONE 0
#define MORI_EP_QUANT_FP8_DIRECT_CAST 1
#define MORI_EP_QUANT_FP8_BLOCKWISE 2
#define MORI_EP_QUANT_FP4_BLOCKWISE 3 /* packed e2m1, H/2 bytes a row, fp32 scale per block (src/cpu/fp4.hpp) */

/* Element types of combine (dispatch moves rows as bytes and needs none). */
#define MORI_EP_DTYPE_BF16 1
#define MORI_EP_DTYPE_FP32 2
#define MORI_EP_DTYPE_FP16 3
#define MORI_EP_DTYPE_FP8_E4M3FN 4   /* OCP fp8: bias 7, NaN = S.1111.111, max 448 */
#define MORI_EP_DTYPE_FP8_E4M3FNUZ 5 /* MI300's fp8: bias 8, one NaN = 0x80, no -0, no inf, max 240 */

typedef struct mori_ep_args {
  unsigned long long region;        /* this PE's region, local address */
  unsigned long long peer_regions;  /* address of u64[world_size]: each PE's region as mapped here */
  unsigned long long input;         /* dispatch: tokens [N, row_bytes]; combine: rows [>= total_recv, row_bytes] */
  unsigned long long weights;       /* f32, dispatch [N, topk], combine [>= total_recv, topk]; 0 = none */
  unsigned long long scales;        /* dispatch: [N, scale_bytes]; 0 = none */
  unsigned long long indices;       /* int32 [N, topk]: global expert ids, -1 = no expert */
  unsigned long long spin_timeout_ns; /* bound of every wait for a peer; 0 = none */
  /* Offsets from the region start. */
  unsigned long long off_disp_tokens;  /* [max_recv, row_bytes] */
  unsigned long long off_disp_weights; /* f32 [max_recv, topk] */
  unsigned long long off_disp_indices; /* i32 [max_recv, topk] */
  unsigned long long off_disp_scales;  /* [max_recv, scale_bytes] */
  unsigned long long off_disp_src_pos; /* i32 [max_recv]: src_pe * world_size * max_tokens + src_token */
  unsigned long long off_comb_tokens;  /* [max_recv, wire_row_bytes]: the registered combine input */
  unsigned long long off_comb_weights; /* f32 [max_recv, topk] */
  unsigned long long off_comb_scales;  /* f32 [max_recv, quant_blocks]: blockwise combine scales */
  unsigned long long off_dest_map;     /* i32 [max_tokens, topk]: dest_pe * max_recv + slot, -1 = not sent */
  unsigned long long off_comb_out;     /* [max_tokens, row_bytes] */
  unsigned long long off_comb_out_weights; /* f32 [max_tokens, topk] */
  unsigned long long trace_buf;        /* mori-viz trace buffer of a profiling build; 0 = none */
  /* Inter-node kernel types only (0 otherwise); [nodes][max_tokens] rows each. */
  unsigned long long off_net_send;     /* [record_bytes]: this PE's records packed per destination node */
  unsigned long long off_net_hop;      /* [record_bytes]: records received from each source node */
  unsigned long long off_net_hop_map;  /* i32 [topk]: the forward's dest map (as off_dest_map) */
  unsigned long long off_net_reply;    /* [reply_bytes]: reduced combine rows for each source node */
  unsigned long long off_net_reply_recv; /* [reply_bytes]: reduced combine rows from each node */
  int rank;
  int world_size;
  int max_tokens;        /* max_num_inp_token_per_rank */
  int max_recv;          /* receive rows per PE */
  int topk;
  int experts_per_rank;
  int row_bytes;         /* bytes of one row of this call's input: the row stride of the dispatch
                            output, the combine output and an unquantised combine input */
  int wire_row_bytes;    /* combine: bytes of one row of the registered combine input (the fp8 row
                            with a quantised format, else row_bytes) */
  int scale_bytes;       /* dispatch: bytes of one row's scales, also their row stride */
  int num_tokens;        /* rows of this call's input (dispatch) / output (combine) */
  int input_rows;        /* combine: rows of an external input; staging more is an error */
  int hidden;            /* elements of one row in this call */
  int quant_blocks;      /* blockwise combine: scale blocks per row */
  int flags;
  int local_first;       /* the PEs this PE reaches by load/store that node-local steps (reserve, */
  int local_count;       /* signal, combine barrier and pull) span: [local_first, +local_count) */
  int group;             /* inter-node: PEs per routing node (a record travels once per node) */
  int record_bytes;      /* inter-node: stride of a dispatch record (see MORI_EP_RECORD_*) */
  int reply_bytes;       /* inter-node: stride of a combine reply (row, then topk f32 weights) */
  int pad_;
} mori_ep_args_t;

/* A dispatch record: the token row, then at 16-byte aligned offsets its top-k ids, its weights, its
 * scales and its source position. A combine reply: the row, then (aligned) its summed weights. */
#define MORI_EP_ALIGN16(x) (((x) + 15) & ~15)
#define MORI_EP_RECORD_INDICES(a) MORI_EP_ALIGN16((a).row_bytes)
#define MORI_EP_RECORD_WEIGHTS(a) (MORI_EP_RECORD_INDICES(a) + 4 * (a).topk)
#define MORI_EP_RECORD_SCALES(a) (MORI_EP_RECORD_WEIGHTS(a) + 4 * (a).topk)
#define MORI_EP_RECORD_SRC_POS(a) (MORI_EP_RECORD_SCALES(a) + (a).scale_bytes)
#define MORI_EP_REPLY_WEIGHTS(a) MORI_EP_ALIGN16((a).row_bytes)

#endif /* MORI_EP_ARGS_H_ */
