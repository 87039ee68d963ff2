# SPDX-License-Identifier: MIT
"""MORI's op module of EP v2 (``mori.ops.dispatch_combine_v2.dispatch_combine_op``): the op, its
config and its routing handle, implemented in mori.ep.v2."""

from __future__ import annotations

from mori.ep.v2.config import EpDispatchCombineConfig
from mori.ep.v2.op import EpDispatchCombineOp
from mori.ep.v2.routing import EpDispatchRoutingHandle

__all__ = ["EpDispatchCombineConfig", "EpDispatchCombineOp", "EpDispatchRoutingHandle"]
