# SPDX-License-Identifier: MIT
"""``EpDispatchRoutingHandle``: the slot layout of one dispatch, kept to replay it.

``dispatch(..., return_routing=True)`` returns one; ``dispatch(..., routing=h)`` sends new token
values to the same slots with no slot reservation (every PE must replay its handle of the same
earlier dispatch), and ``combine(..., routing=h)`` combines by that layout even after other
dispatches (a backward pass, for instance). The tensors live on the op's device and are the
caller's; ``tensors()`` / ``from_tensors()`` move them in and out of other code (autograd ctx).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EpDispatchRoutingHandle:
    #: int32 [N, K]: ``dest_pe * max_num_tokens_to_recv() + slot`` of each pick, -1 = not sent.
    disp_dest_tok_id_map: Any
    #: int32 [1]: rows this PE received in that dispatch.
    total_recv_token_num: Any
    #: int32 [max_num_tokens_to_recv()]: source position of each received row (valid up to the total).
    disp_tok_id_to_src_tok_id_local: Any
    #: N, the tokens this PE dispatched.
    cur_rank_num_token: int

    def tensors(self) -> list[Any]:
        return [self.disp_dest_tok_id_map, self.total_recv_token_num, self.disp_tok_id_to_src_tok_id_local]

    @classmethod
    def from_tensors(cls, tensors: list[Any], cur_rank_num_token: int) -> EpDispatchRoutingHandle:
        dest_map, total, src = tensors
        return cls(dest_map, total, src, cur_rank_num_token)
