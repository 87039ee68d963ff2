# SPDX-License-Identifier: MIT
"""mori.ep.v2: MORI's v2 EP API (``mori.ops.dispatch_combine_v2``) on mori.ep's backends.

Same data contract as v1 (``mori.ep``), with MORI's v2 config and call contract: ``combine`` takes
the routing handle of a dispatch instead of relying on "the last dispatch". Every PE, with a
``mori.cco.Communicator`` ``comm`` of the PEs (or ``comm=None`` once ``mori.shmem`` is initialised)::

    cfg = EpDispatchCombineConfig(rank=rank, world_size=n, hidden_dim=7168, max_num_inp_token_per_rank=4096,
                                  num_experts_per_rank=256 // n, num_experts_per_token=8)
    with EpDispatchCombineOp(cfg, comm) as op:
        out, out_w, _, out_idx, total, routing = op.dispatch(x, weights, None, indices, return_routing=True)
        ...                                       # experts on out[:total]
        y, y_w = op.combine(expert_out, out_w, routing=routing)
"""

from __future__ import annotations

from mori.ep.errors import EpConfigError, EpError, EpInputError, EpOverflowError, EpTimeoutError, EpUnsupportedError
from mori.ep.v2.config import EpDispatchCombineConfig
from mori.ep.v2.errors import EpCommunicatorError, EpOpClosedError, EpPlansUnavailableError, EpRoutingError
from mori.ep.v2.op import EpDispatchCombineOp
from mori.ep.v2.routing import EpDispatchRoutingHandle

__all__ = [
    "EpCommunicatorError",
    "EpConfigError",
    "EpDispatchCombineConfig",
    "EpDispatchCombineOp",
    "EpDispatchRoutingHandle",
    "EpError",
    "EpInputError",
    "EpOpClosedError",
    "EpOverflowError",
    "EpPlansUnavailableError",
    "EpRoutingError",
    "EpTimeoutError",
    "EpUnsupportedError",
]
