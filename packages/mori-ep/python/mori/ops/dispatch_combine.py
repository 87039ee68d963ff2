"""mori.ops.dispatch_combine: MORI's module of the EP v1 op, its config and enums (from mori.ep)."""

from __future__ import annotations

from mori.ep.config import (
    EpDispatchCombineConfig,
    EpDispatchCombineKernelType,
    EpDispatchCombineQuantType,
)
from mori.ep.kernels import warmup_jit_kernels
from mori.ep.op import EpDispatchCombineOp
from mori.ep.routing import EpDispatchRoutingHandle

__all__ = [
    "EpDispatchCombineConfig",
    "EpDispatchCombineKernelType",
    "EpDispatchCombineOp",
    "EpDispatchCombineQuantType",
    "EpDispatchRoutingHandle",
    "warmup_jit_kernels",
]
