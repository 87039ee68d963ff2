# SPDX-License-Identifier: MIT
"""v2's ``EpDispatchRoutingHandle``: MORI's v2 fields and encodings over a v1 routing handle.

The two APIs encode the same layout differently (R = receive rows of the op,
``effective_max_recv``; M = ``max_num_inp_token_per_rank``; W = world size):

==========================================  ============================  ==========================
field                                       v1                            v2 (MORI)
==========================================  ============================  ==========================
``disp_dest_tok_id_map`` [N, K]             ``pe * R + slot``, -1 unsent  ``pe * R + slot``, W * R
``disp_tok_id_to_src_tok_id_local`` [R]     ``src_rank * W * M + token``  ``src_rank * M + token``
==========================================  ============================  ==========================

A v2 handle holds the v2 encodings (the caller may read them, or rebuild a handle from them with
``from_tensors``); the op turns them back into a v1 handle on each use with elementwise torch
operations on the device (no host sync, so replay and combine stay graph-capturable).
"""

from __future__ import annotations

from dataclasses import dataclass

from mori.ep.routing import EpDispatchRoutingHandle as V1Handle


@dataclass(eq=False)
class EpDispatchRoutingHandle(V1Handle):
    """The slot layout of one dispatch; ``combine`` needs it, ``dispatch(routing=h)`` replays it.

    The fields, ``tensors()`` and ``from_tensors()`` are v1's (v2 is intra-node only, so the two
    inter-node fields stay empty, kept for MORI's 5-tensor unpacking); the encodings of
    ``disp_dest_tok_id_map`` (``dest_pe * R + slot``, ``world_size * R`` = not sent) and
    ``disp_tok_id_to_src_tok_id_local`` (``src_rank * M + src_token``) are MORI's v2 ones (module
    docstring). Its tensors are the caller's (on the op's device); the handle stays valid after
    later dispatches and until its op is closed.
    """


@dataclass(frozen=True)
class Encoding:
    """The sizes both encodings depend on."""

    world_size: int
    max_tokens: int  # M
    max_recv: int  # R

    def from_v1(self, handle: V1Handle, owner: int) -> EpDispatchRoutingHandle:
        import torch

        dest, src = handle.disp_dest_tok_id_map, handle.disp_tok_id_to_src_tok_id_local
        sentinel = self.world_size * self.max_recv
        stride = self.world_size * self.max_tokens
        empty = torch.empty(0, dtype=torch.int32, device=dest.device)
        v2 = EpDispatchRoutingHandle(
            disp_dest_tok_id_map=torch.where(dest < 0, sentinel, dest).to(torch.int32),
            inter_node_disp_dest_tok_id_map=empty,
            inter_node_disp_send_map=empty.clone(),
            total_recv_token_num=handle.total_recv_token_num,
            disp_tok_id_to_src_tok_id_local=((src // stride) * self.max_tokens + src % stride).to(torch.int32),
            cur_rank_num_token=handle.cur_rank_num_token,
        )
        v2.owner = owner
        return v2

    def to_v1(self, handle: EpDispatchRoutingHandle) -> V1Handle:
        import torch

        dest, src = handle.disp_dest_tok_id_map, handle.disp_tok_id_to_src_tok_id_local
        sentinel = self.world_size * self.max_recv
        unsent = (dest < 0) | (dest >= sentinel)
        v1_dest = torch.where(unsent, -1, dest).to(torch.int32).contiguous()
        if src is None:
            v1_src = torch.empty(0, dtype=torch.int32, device=dest.device)
        else:
            v1_src = ((src // self.max_tokens) * self.world_size * self.max_tokens + src % self.max_tokens).to(
                torch.int32
            )
        empty = torch.empty(0, dtype=torch.int32, device=dest.device)
        return V1Handle(v1_dest, empty, empty, handle.total_recv_token_num, v1_src, handle.cur_rank_num_token)
