# SPDX-License-Identifier: MIT
"""The DeepEP-compatible "standard MoE" layout of a dispatch: rows grouped per local expert.

``convert_dispatch_output`` turns dispatch's received rows into ``packed_recv_x [E_loc, R, H]``
(row j of expert e is the j-th received row that picked e), with ``packed_recv_count [E_loc]`` and
``packed_recv_src_info [E_loc, R]`` (the row's source position, as
``get_dispatch_src_token_pos``); ``convert_combine_input`` takes the experts' outputs in that
layout and writes, for every received row, the weighted sum over its local picks into the
registered combine buffer, ready for ``combine(..., use_external_inp_buf=0)``. R =
``max_num_tokens_to_recv()``. Both are torch operations on the op's device with no host sync, so
they capture in CUDA graphs like dispatch and combine. The order of rows within an expert is the
receive order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mori.ep.errors import EpInputError


@dataclass
class StandardMoeLayout:
    """Where each (received row, pick) went in the packed layout; convert_combine_input reads it."""

    #: int64 [R, K]: flat index ``expert * R + j`` into packed rows, or ``E_loc * R`` (a spare row)
    #: for picks that are not local or rows past total_recv.
    slot: Any
    #: bool [R, K]: the picks that are local experts of received rows.
    local: Any


def _layout(op: Any, out_indices: Any, total_recv: Any) -> tuple[StandardMoeLayout, Any]:
    import torch

    config = op.config
    recv, per_rank = op.max_num_tokens_to_recv(), config.num_experts_per_rank
    rows = torch.arange(recv, device=out_indices.device)[:, None] < total_recv.to(out_indices.device)
    expert = out_indices[:recv].long() - config.rank * per_rank
    local = rows & (expert >= 0) & (expert < per_rank)
    bucket = torch.where(local, expert, per_rank).reshape(-1)
    onehot = torch.nn.functional.one_hot(bucket, per_rank + 1)
    # j-th pick of an expert, in receive order: running count of that expert's picks so far.
    position = onehot.cumsum(0).gather(1, bucket[:, None]).squeeze(1) - 1
    slot = torch.where(local.reshape(-1), bucket * recv + position, per_rank * recv).reshape(recv, -1)
    count = onehot[:, :per_rank].sum(0).to(torch.int32)
    return StandardMoeLayout(slot, local), count


def convert_dispatch_output(
    op: Any, dispatch_out_x: Any, dispatch_out_topk_idx: Any, total_recv: Any
) -> tuple[Any, ...]:
    """``(packed_recv_x [E_loc, R, H], packed_recv_count [E_loc] int32, packed_recv_src_info
    [E_loc, R] int32, packed_recv_layout_range (empty int64), layout)`` from dispatch's outputs."""
    import torch

    recv, per_rank = op.max_num_tokens_to_recv(), op.config.num_experts_per_rank
    if dispatch_out_x.dim() != 2 or dispatch_out_x.shape[0] < recv:
        raise EpInputError(
            f"dispatch_out_x must be dispatch's [{recv}, H] output, got shape {tuple(dispatch_out_x.shape)}"
        )
    if tuple(dispatch_out_topk_idx.shape) != (recv, op.config.num_experts_per_token):
        raise EpInputError(
            f"dispatch_out_topk_idx must be dispatch's [{recv}, {op.config.num_experts_per_token}] output, "
            f"got shape {tuple(dispatch_out_topk_idx.shape)}"
        )
    layout, count = _layout(op, dispatch_out_topk_idx, total_recv)
    hidden = dispatch_out_x.shape[1]
    device = dispatch_out_x.device
    topk = op.config.num_experts_per_token
    # Rows of 1-byte elements move as uint8: torch has no indexing of packed fp4 (float4_e2m1fn_x2).
    rows_x = dispatch_out_x.view(torch.uint8) if dispatch_out_x.element_size() == 1 else dispatch_out_x
    # One spare row past the packed rows takes every non-local pick, so no pick needs a host-side filter.
    packed = torch.zeros(per_rank * recv + 1, hidden, dtype=rows_x.dtype, device=device)
    rows = torch.arange(recv, device=device)[:, None].expand(recv, topk).reshape(-1)
    packed.index_copy_(0, layout.slot.reshape(-1), rows_x[:recv][rows])
    packed = packed.view(dispatch_out_x.dtype)
    src_pos = op._view("off_disp_src_pos", recv, 1, torch.int32).view(-1)
    src_info = torch.full((per_rank * recv + 1,), -1, dtype=torch.int32, device=device)
    src_info.index_copy_(0, layout.slot.reshape(-1), src_pos[rows])
    return (
        packed[:-1].view(per_rank, recv, hidden),
        count,
        src_info[:-1].view(per_rank, recv),
        torch.empty(0, dtype=torch.int64, device=device),
        layout,
    )


def convert_combine_input(op: Any, packed_recv_y: Any, weights: Any, layout: StandardMoeLayout) -> Any:
    """Writes, for every received row i, ``sum over its local picks k of weights[i, k] *
    packed_recv_y[expert_k, j_k]`` (fp32, then the dtype of packed_recv_y) into the registered
    combine buffer and returns that ``[R, H]`` view; ``weights`` is dispatch's out_weights (or None
    for a plain sum)."""
    import torch

    recv, per_rank = op.max_num_tokens_to_recv(), op.config.num_experts_per_rank
    if packed_recv_y.dim() != 3 or tuple(packed_recv_y.shape[:2]) != (per_rank, recv):
        raise EpInputError(f"packed_recv_y must be [{per_rank}, {recv}, H], got shape {tuple(packed_recv_y.shape)}")
    hidden = packed_recv_y.shape[2]
    flat = torch.cat([packed_recv_y.reshape(per_rank * recv, hidden), packed_recv_y.new_zeros(1, hidden)])
    total = torch.zeros(recv, hidden, dtype=torch.float32, device=packed_recv_y.device)
    for k in range(layout.slot.shape[1]):
        part = flat[layout.slot[:, k]].float()
        if weights is not None:
            part = part * torch.where(layout.local[:, k], weights[:recv, k], 0.0)[:, None]
        total += part
    target = op.get_registered_combine_input_buffer(packed_recv_y.dtype, hidden)
    target.copy_(total.to(packed_recv_y.dtype))
    return target
