# SPDX-License-Identifier: MIT
"""Where an op's buffers sit in its symmetric region, and the argument struct of every launch.

``EpArgs`` mirrors ``mori_ep_args_t`` (src/device/ep_args.h) field for field; the test suite
checks its size and the control offsets against the compiled constants.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from mori.ep.config import EpDispatchCombineConfig, EpDispatchCombineQuantType
from mori.ep.errors import EpConfigError, EpError, EpInputError, EpOverflowError, EpTimeoutError
from mori.ep.settings import setting

# Control words (ep_args.h MORI_EP_CTRL_*), as byte offsets from the start of a region.
CTRL_ERROR = 4
CTRL_TOTAL_RECV = 24
CTRL_NET_HOP_SIGNAL = 4352
CTRL_NET_REPLY_SIGNAL = 6400
CTRL_BYTES = 8704

ERR_TIMEOUT = 1
ERR_RECV_OVERFLOW = 2
ERR_BAD_EXPERT = 3
ERR_SHORT_INPUT = 4


def recorded_error(code: int, config: EpDispatchCombineConfig, max_recv: int) -> EpError:
    """The exception for ``code``, a nonzero ERR_* that the kernels left in the op's error word
    (``max_recv``: the op's receive rows), as both mori.ep's and mori.jax's ``check_error`` raise it."""
    if code == ERR_TIMEOUT:
        return EpTimeoutError(
            f"PE {config.rank}: a peer did not answer within MORI_EP_TIMEOUT={setting('MORI_EP_TIMEOUT')} s"
        )
    if code == ERR_RECV_OVERFLOW:
        return EpOverflowError(
            f"PE {config.rank}: more rows arrived than max_num_tokens_to_recv()={max_recv} "
            "(raise max_total_recv_tokens); the excess rows were dropped"
        )
    if code == ERR_BAD_EXPERT:
        return EpInputError(f"indices held an expert id >= {config.total_experts}; those picks were skipped")
    if code == ERR_SHORT_INPUT:
        return EpInputError("combine input had fewer rows than total_recv; the missing rows were not combined")
    return EpTimeoutError(f"PE {config.rank}: unknown error code {code} in the op's control words")


HAS_WEIGHTS = 1
HAS_SCALES = 2
EXTERNAL_INPUT = 4
REPLAY = 8
FORWARD = 16

DTYPE_CODES = {"bfloat16": 1, "float32": 2, "float16": 3, "float8_e4m3fn": 4, "float8_e4m3fnuz": 5}

_ALIGN = 256

#: Combine formats with per-block fp32 scales (MORI_FP8_COMBINE_SCALE_DIM blocks a row).
BLOCKWISE_QUANT_TYPES = (EpDispatchCombineQuantType.Fp8BlockwiseQuant, EpDispatchCombineQuantType.Fp4BlockwiseQuant)


class EpArgs(ctypes.Structure):
    """``mori_ep_args_t`` (src/device/ep_args.h), field for field: tests/test_struct_mirrors.py pins the
    two together; bump MORI_EP_ARGS_VERSION on a change."""

    _fields_ = [
        ("region", ctypes.c_uint64),
        ("peer_regions", ctypes.c_uint64),
        ("input", ctypes.c_uint64),
        ("weights", ctypes.c_uint64),
        ("scales", ctypes.c_uint64),
        ("indices", ctypes.c_uint64),
        ("spin_timeout_ns", ctypes.c_uint64),
        ("off_disp_tokens", ctypes.c_uint64),
        ("off_disp_weights", ctypes.c_uint64),
        ("off_disp_indices", ctypes.c_uint64),
        ("off_disp_scales", ctypes.c_uint64),
        ("off_disp_src_pos", ctypes.c_uint64),
        ("off_comb_tokens", ctypes.c_uint64),
        ("off_comb_weights", ctypes.c_uint64),
        ("off_comb_scales", ctypes.c_uint64),
        ("off_dest_map", ctypes.c_uint64),
        ("off_comb_out", ctypes.c_uint64),
        ("off_comb_out_weights", ctypes.c_uint64),
        ("trace_buf", ctypes.c_uint64),
        ("off_net_send", ctypes.c_uint64),
        ("off_net_hop", ctypes.c_uint64),
        ("off_net_hop_map", ctypes.c_uint64),
        ("off_net_reply", ctypes.c_uint64),
        ("off_net_reply_recv", ctypes.c_uint64),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("max_tokens", ctypes.c_int32),
        ("max_recv", ctypes.c_int32),
        ("topk", ctypes.c_int32),
        ("experts_per_rank", ctypes.c_int32),
        ("row_bytes", ctypes.c_int32),
        ("wire_row_bytes", ctypes.c_int32),
        ("scale_bytes", ctypes.c_int32),
        ("num_tokens", ctypes.c_int32),
        ("input_rows", ctypes.c_int32),
        ("hidden", ctypes.c_int32),
        ("quant_blocks", ctypes.c_int32),
        ("flags", ctypes.c_int32),
        ("local_first", ctypes.c_int32),
        ("local_count", ctypes.c_int32),
        ("group", ctypes.c_int32),
        ("record_bytes", ctypes.c_int32),
        ("reply_bytes", ctypes.c_int32),
        ("pad_", ctypes.c_int32),
    ]


def _align(value: int) -> int:
    return -(-value // _ALIGN) * _ALIGN


def _align16(value: int) -> int:
    return -(-value // 16) * 16


def record_bytes(row_bytes: int, topk: int, scale_bytes: int) -> int:
    """Stride of an inter-node dispatch record (ep_args.h MORI_EP_RECORD_*): row, ids, weights,
    scales, source position."""
    return _align16(_align16(row_bytes) + 8 * topk + scale_bytes + 4)


def reply_bytes(row_bytes: int, topk: int) -> int:
    """Stride of an inter-node combine reply: the row, then its summed weights."""
    return _align16(_align16(row_bytes) + 4 * topk)


@dataclass(frozen=True)
class Layout:
    """Byte offsets of an op's buffers inside its region, sized for the widest call the config allows."""

    max_recv: int
    row_capacity: int  # bytes of the widest row (hidden_dim * max_token_type_size)
    scale_capacity: int
    quant_blocks: int
    group: int  # PEs per routing node of the inter-node kernel types (0: intra-node)
    offsets: dict[str, int]
    nbytes: int

    @classmethod
    def for_config(cls, config: EpDispatchCombineConfig) -> Layout:
        quant_blocks = 0
        if config.quant in BLOCKWISE_QUANT_TYPES:  # MORI: fp4_blockwise shares fp8_blockwise's scale layout
            quant_blocks = setting("MORI_FP8_COMBINE_SCALE_DIM")
            if quant_blocks < 1:
                raise EpConfigError(f"MORI_FP8_COMBINE_SCALE_DIM={quant_blocks} must be >= 1 for {config.quant_type}")
        recv, tokens, topk = (
            config.max_num_tokens_to_recv(),
            config.max_num_inp_token_per_rank,
            config.num_experts_per_token,
        )
        row = _align16(config.hidden_dim * config.max_token_type_size)  # uint8 rows travel padded to 16 (byte_rows)
        scale = config.scale_dim * config.scale_type_size
        sizes = {
            "off_disp_tokens": recv * row,
            "off_disp_weights": recv * topk * 4,
            "off_disp_indices": recv * topk * 4,
            "off_disp_scales": recv * scale,
            "off_disp_src_pos": recv * 4,
            "off_comb_tokens": recv * row,
            "off_comb_weights": recv * topk * 4,
            "off_comb_scales": recv * quant_blocks * 4,
            "off_dest_map": tokens * topk * 4,
            "off_comb_out": tokens * row,
            "off_comb_out_weights": tokens * topk * 4,
        }
        group = config.routing_group
        if group:
            rows = config.world_size // group * tokens
            record, reply = record_bytes(row, topk, scale), reply_bytes(row, topk)
            sizes.update(
                off_net_send=rows * record,
                off_net_hop=rows * record,
                off_net_hop_map=rows * topk * 4,
                off_net_reply=rows * reply,
                off_net_reply_recv=rows * reply,
            )
        offsets, cursor = {}, _align(CTRL_BYTES)
        for name, size in sizes.items():
            offsets[name] = cursor
            cursor = _align(cursor + size)
        return cls(recv, row, scale, quant_blocks, group, offsets, cursor)

    def base_args(self, config: EpDispatchCombineConfig, region: int, peer_regions: int, timeout_ns: int) -> EpArgs:
        """The fields that stay the same for every call of the op."""
        args = EpArgs(
            region=region,
            peer_regions=peer_regions,
            spin_timeout_ns=timeout_ns,
            rank=config.rank,
            world_size=config.world_size,
            max_tokens=config.max_num_inp_token_per_rank,
            max_recv=self.max_recv,
            topk=config.num_experts_per_token,
            experts_per_rank=config.num_experts_per_rank,
            quant_blocks=self.quant_blocks,
            local_first=0,
            local_count=config.world_size,
            group=self.group,
        )
        if self.group:  # node-local steps span this PE's routing node
            args.local_first = config.rank // self.group * self.group
            args.local_count = self.group
        for name, offset in self.offsets.items():
            setattr(args, name, offset)
        return args
