# SPDX-License-Identifier: MIT
"""Routing handles of the inter-node kernel types (InterNode, InterNodeV1, InterNodeV1LL, AsyncLL).

An inter-node dispatch places a token in three steps (src/cpu/net.cpp): the source packs one record
per destination node into that node's batch (the op's dest map: ``node * M + record``), the node's
proxy PE forwards each record to its node's PEs (the forward map of the hop rows: ``pe * R +
slot``), and combine sends each source node's replies back, as many as that node's batch had
records. A handle keeps all three, so that replaying it puts every record in the same row of the
same batch and every row in the same slot (nothing is reserved), and combine by it reduces and
returns the same rows:

- ``disp_dest_tok_id_map`` [N, K]: the source's dest map;
- ``inter_node_disp_dest_tok_id_map`` [nodes * M, K]: this PE's forward map as a proxy;
- ``inter_node_disp_send_map`` [nodes]: records of each node's batch that this PE forwarded;
- ``total_recv_token_num`` and ``disp_tok_id_to_src_tok_id_local``: as intra-node.

Every copy here is a device copy on the op's stream (no host sync, graph-capturable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mori.ep import inputs
from mori.ep.errors import EpRoutingError
from mori.ep.layout import CTRL_NET_HOP_SIGNAL
from mori.ep.routing import EpDispatchRoutingHandle

if TYPE_CHECKING:
    from mori.ep.op import EpDispatchCombineOp


def _nodes(op: EpDispatchCombineOp) -> int:
    return op.config.world_size // op.config.routing_group


def _forward_map(op: EpDispatchCombineOp) -> Any:
    rows = _nodes(op) * op.config.max_num_inp_token_per_rank
    return op._view("off_net_hop_map", rows, op.config.num_experts_per_token, op._torch.int32)


def _batch_rows_words(op: EpDispatchCombineOp) -> Any:
    """The rows halves of the hop signals (``call << 32 | rows`` per source node, little-endian):
    what the proxy's combine reduces and sends back per node (net.cpp's NetCombineSend)."""
    nodes = _nodes(op)
    words = op._region[CTRL_NET_HOP_SIGNAL : CTRL_NET_HOP_SIGNAL + 8 * nodes].view(op._torch.int32)
    return words.view(nodes, 2)[:, 0]


def new_handle(op: EpDispatchCombineOp, tokens: int) -> EpDispatchRoutingHandle:
    """A handle of the right shapes, filled by ``fill`` once the dispatch's receive half has run
    (AsyncLL's ``dispatch_send`` returns it before then, like its outputs)."""
    torch, device = op._torch, op.device
    topk, nodes, m = op.config.num_experts_per_token, _nodes(op), op.config.max_num_inp_token_per_rank
    handle = EpDispatchRoutingHandle(
        disp_dest_tok_id_map=torch.empty(tokens, topk, dtype=torch.int32, device=device),
        inter_node_disp_dest_tok_id_map=torch.empty(nodes * m, topk, dtype=torch.int32, device=device),
        inter_node_disp_send_map=torch.empty(nodes, dtype=torch.int32, device=device),
        total_recv_token_num=torch.empty(1, dtype=torch.int32, device=device),
        disp_tok_id_to_src_tok_id_local=torch.empty(op.layout.max_recv, dtype=torch.int32, device=device),
        cur_rank_num_token=tokens,
    )
    handle.owner = op._id
    return handle


def fill(op: EpDispatchCombineOp, handle: EpDispatchRoutingHandle) -> None:
    """The layout of the dispatch that just completed, into ``handle``. The records per batch
    come from the forward map, which only this PE writes: a hop row the proxy forwarded has a
    slot on at least one of its node's PEs (the record came because a pick is there), rows past a
    batch are all -1. (The hop signals say the same, but a source may overwrite them with its next
    batch as soon as the forward acknowledged this one.)"""
    torch = op._torch
    topk, nodes, m = op.config.num_experts_per_token, _nodes(op), op.config.max_num_inp_token_per_rank
    tokens = handle.cur_rank_num_token
    forward = _forward_map(op)
    handle.disp_dest_tok_id_map.copy_(op._view("off_dest_map", tokens, topk, torch.int32))
    handle.inter_node_disp_dest_tok_id_map.copy_(forward)
    forwarded = (forward.view(nodes, m, topk) >= 0).any(dim=2)
    position = torch.arange(1, m + 1, dtype=torch.int32, device=op.device)
    handle.inter_node_disp_send_map.copy_(torch.where(forwarded, position, 0).amax(dim=1))
    handle.total_recv_token_num.copy_(op._total_recv_view())
    handle.disp_tok_id_to_src_tok_id_local.copy_(op._view("off_disp_src_pos", op.layout.max_recv, 1, torch.int32)[:, 0])


def check(op: EpDispatchCombineOp, handle: EpDispatchRoutingHandle) -> None:
    """The inter-node fields fit this op (an intra-node op's handle has them empty)."""
    topk, nodes, m = op.config.num_experts_per_token, _nodes(op), op.config.max_num_inp_token_per_rank
    expected = {
        "inter_node_disp_dest_tok_id_map": (handle.inter_node_disp_dest_tok_id_map, (nodes * m, topk)),
        "inter_node_disp_send_map": (handle.inter_node_disp_send_map, (nodes,)),
    }
    for field, (tensor, shape) in expected.items():
        if not (hasattr(tensor, "shape") and tuple(tensor.shape) == shape):
            described = tuple(tensor.shape) if hasattr(tensor, "shape") else type(tensor).__name__
            raise EpRoutingError(
                f"routing.{field} must be int32 {list(shape)} for {op.config.kernel_type.name} on "
                f"{op.config.world_size} PEs in {nodes} nodes, got {described} (a handle of another op?)"
            )
        inputs.check_tensor(f"routing.{field}", tensor, device=op.device, dtypes=("int32",), ndim=len(shape))


def load(op: EpDispatchCombineOp, handle: EpDispatchRoutingHandle, *, combine: bool) -> None:
    """The handle's layout into the op's region. A dispatch replay needs the source's dest map and
    the proxy's forward map (the batches' rows arrive with the replayed records); combine also
    needs the rows of each batch, written into the rows halves of the hop signals: no source
    writes them again before this combine's replies reach it, and the call halves stay."""
    torch = op._torch
    tokens, topk = handle.cur_rank_num_token, op.config.num_experts_per_token
    op._view("off_dest_map", tokens, topk, torch.int32).copy_(handle.disp_dest_tok_id_map)
    _forward_map(op).copy_(handle.inter_node_disp_dest_tok_id_map)
    op._total_recv_view().copy_(handle.total_recv_token_num)
    if combine:
        _batch_rows_words(op).copy_(handle.inter_node_disp_send_map)
