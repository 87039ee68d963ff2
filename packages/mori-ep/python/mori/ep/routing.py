# SPDX-License-Identifier: MIT
"""``EpDispatchRoutingHandle``: the slot layout of one dispatch, kept to replay it.

``dispatch(..., return_routing=True)`` returns one; ``dispatch(..., routing=h)`` sends new token
values to the same slots with no slot reservation (every PE must replay its handle of the same
earlier dispatch), and ``combine(..., routing=h)`` combines by that layout even after other
dispatches (a backward pass, for instance). The tensors live on the op's device and are the
caller's; ``tensors()`` / ``from_tensors()`` move them in and out of other code (autograd ctx).

The fields are MORI's, in MORI's order. Their encodings are this package's (the kernels are not
MORI's), so a handle is only meaningful to the op that made it:

==========================================  ==========================  ===============================
field                                       intra-node types            inter-node types
==========================================  ==========================  ===============================
``disp_dest_tok_id_map`` [N, K]             ``pe * R + slot``           ``node * M + record``: the
                                                                        record of node's batch that
                                                                        carries the pick
``inter_node_disp_dest_tok_id_map``         empty                       [nodes * M, K]: as this PE's
                                                                        node proxy, ``pe * R + slot``
                                                                        of each pick of each record
                                                                        it forwarded
``inter_node_disp_send_map``                empty                       [nodes]: records of each source
                                                                        node's batch it forwarded (the
                                                                        replies combine sends back)
``total_recv_token_num`` [1]                rows received               rows received
``disp_tok_id_to_src_tok_id_local`` [R]     source positions            source positions
==========================================  ==========================  ===============================

(-1 = not sent; R = ``max_num_tokens_to_recv()``, M = ``max_num_inp_token_per_rank``, nodes =
``world_size // gpu_per_node`` for InterNodeV1/V1LL, ``world_size`` for InterNode/AsyncLL.)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, TypeVar

from mori.ep.errors import EpRoutingError

_OP_IDS = itertools.count(1)
_Handle = TypeVar("_Handle", bound="EpDispatchRoutingHandle")


def new_op_id() -> int:
    """A process-unique id for an op, which its handles carry (``owner``)."""
    return next(_OP_IDS)


def check_made_for(name: str, routing: EpDispatchRoutingHandle, op_id: int, tokens: int) -> None:
    """Refuses (EpRoutingError) a handle ``name`` that another op made, or that a dispatch of
    another token count than this call's ``tokens`` made: its slots would mean nothing here."""
    if routing.owner is not None and routing.owner != op_id:
        raise EpRoutingError(f"{name} is stale: it was made by another op (#{routing.owner}), not this one (#{op_id})")
    if routing.cur_rank_num_token != tokens:
        raise EpRoutingError(
            f"{name} was made by a dispatch of {routing.cur_rank_num_token} tokens; this call has {tokens}"
        )


@dataclass(eq=False)
class EpDispatchRoutingHandle:
    #: int32 [N, K]: where each pick went (module docstring), -1 = not sent by this pick.
    disp_dest_tok_id_map: Any
    #: inter-node types: int32 [nodes * M, K], the forward layout of this PE as its node's proxy.
    inter_node_disp_dest_tok_id_map: Any
    #: inter-node types: int32 [nodes], the records of each node's batch this PE forwarded.
    inter_node_disp_send_map: Any
    #: int32 [1]: rows this PE received in that dispatch.
    total_recv_token_num: Any
    #: int32 [max_num_tokens_to_recv()]: source position of each received row (valid up to the total).
    disp_tok_id_to_src_tok_id_local: Any = None
    #: N, the tokens this PE dispatched.
    cur_rank_num_token: int = 0

    def __post_init__(self) -> None:
        # The op that made the handle (None: built by hand or by from_tensors); ops reject others'.
        self.owner: int | None = None

    def tensors(self) -> tuple[Any, Any, Any, Any, Any]:
        return (
            self.disp_dest_tok_id_map,
            self.inter_node_disp_dest_tok_id_map,
            self.inter_node_disp_send_map,
            self.total_recv_token_num,
            self.disp_tok_id_to_src_tok_id_local,
        )

    @classmethod
    def from_tensors(cls: type[_Handle], tensors: Any, cur_rank_num_token: int = 0) -> _Handle:
        dest, inter_dest, inter_send, total, src = tensors
        return cls(dest, inter_dest, inter_send, total, src, cur_rank_num_token)
