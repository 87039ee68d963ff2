# SPDX-License-Identifier: MIT
"""MORI's EP configuration: the kernel-type and quant enums and ``EpDispatchCombineConfig``.

Every field is checked when the config is made; a bad one raises ``EpConfigError`` naming the
field, its value and the limit it breaks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from mori.ep.errors import EpConfigError

#: Picks per token a warp routes (one lane per pick).
MAX_EXPERTS_PER_TOKEN = 32
#: PEs one op can span (the control arrays of a region hold this many).
MAX_WORLD_SIZE = 128


class EpDispatchCombineKernelType(enum.IntEnum):
    """MORI's kernel types, with MORI's values."""

    IntraNode = 0
    InterNode = 1
    InterNodeV1 = 2
    InterNodeV1LL = 3
    AsyncLL = 4
    IntraNodeLL = 5


class EpDispatchCombineQuantType(enum.IntEnum):
    """Wire format of combine (MORI's ``quant_type`` strings map onto these)."""

    None_ = 0
    Fp8DirectCast = 1
    Fp8BlockwiseQuant = 2
    Fp4BlockwiseQuant = 3


QUANT_TYPES: dict[str, EpDispatchCombineQuantType] = {
    "none": EpDispatchCombineQuantType.None_,
    "fp8_direct_cast": EpDispatchCombineQuantType.Fp8DirectCast,
    "fp8_blockwise": EpDispatchCombineQuantType.Fp8BlockwiseQuant,
    "fp4_blockwise": EpDispatchCombineQuantType.Fp4BlockwiseQuant,
}

#: Kernel types whose every PE reaches every other by load/store.
INTRA_NODE_KERNEL_TYPES = (EpDispatchCombineKernelType.IntraNode, EpDispatchCombineKernelType.IntraNodeLL)
#: Kernel types that route through mori-shmem's put/signal, so peers may sit on other hosts.
INTER_NODE_KERNEL_TYPES = (
    EpDispatchCombineKernelType.InterNode,
    EpDispatchCombineKernelType.InterNodeV1,
    EpDispatchCombineKernelType.InterNodeV1LL,
    EpDispatchCombineKernelType.AsyncLL,
)
#: Kernel types whose records travel once per node to the rail-aligned proxy, which fans them out.
RAIL_PROXY_KERNEL_TYPES = (EpDispatchCombineKernelType.InterNodeV1, EpDispatchCombineKernelType.InterNodeV1LL)
#: Kernel types with one-pass (per-row) slot reservation.
LOW_LATENCY_KERNEL_TYPES = (EpDispatchCombineKernelType.IntraNodeLL, EpDispatchCombineKernelType.InterNodeV1LL)


#: The fields every form of MORI's config spells alike (this dataclass, mori.cpp's C++ config,
#: mori.ep.v2's config): converting one form into another copies them as they are.
SHARED_FIELDS = (
    "rank",
    "world_size",
    "hidden_dim",
    "scale_dim",
    "scale_type_size",
    "max_num_inp_token_per_rank",
    "num_experts_per_rank",
    "num_experts_per_token",
    "max_total_recv_tokens",
)


def shared_fields(config: Any) -> dict[str, Any]:
    """The SHARED_FIELDS of any form of the config, as keyword arguments for another form."""
    return {name: getattr(config, name) for name in SHARED_FIELDS}


def check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    """Raises EpConfigError naming ``name`` unless ``value`` is an int in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise EpConfigError(f"{name}={value!r} must be an int")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise EpConfigError(f"{name}={value} must be {bound}")


@dataclass
class EpDispatchCombineConfig:
    """MORI's config, field for field. ``data_type`` only documents the usual dispatch dtype: each
    call uses its input's dtype, so one op can dispatch fp8 and combine bf16 as long as
    ``max_token_type_size`` covers the widest."""

    data_type: Any
    rank: int
    world_size: int
    hidden_dim: int
    scale_dim: int
    scale_type_size: int
    max_token_type_size: int
    max_num_inp_token_per_rank: int
    num_experts_per_rank: int
    num_experts_per_token: int
    warp_num_per_block: int = 8
    block_num: int = 80
    max_total_recv_tokens: int = 0
    use_external_inp_buf: bool = True
    kernel_type: EpDispatchCombineKernelType = EpDispatchCombineKernelType.IntraNode
    gpu_per_node: int = 8
    rdma_block_num: int = 0
    num_qp_per_pe: int = 1
    quant_type: str = "none"

    def __post_init__(self) -> None:
        check_int("world_size", self.world_size, 1, MAX_WORLD_SIZE)
        check_int("rank", self.rank, 0, self.world_size - 1)
        check_int("hidden_dim", self.hidden_dim, 1)
        check_int("scale_dim", self.scale_dim, 0)
        check_int("scale_type_size", self.scale_type_size, 0, 8)
        check_int("max_token_type_size", self.max_token_type_size, 1, 8)
        check_int("max_num_inp_token_per_rank", self.max_num_inp_token_per_rank, 1)
        check_int("num_experts_per_rank", self.num_experts_per_rank, 1)
        check_int("num_experts_per_token", self.num_experts_per_token, 1, MAX_EXPERTS_PER_TOKEN)
        check_int("warp_num_per_block", self.warp_num_per_block, 1, 32)
        check_int("block_num", self.block_num, 1, 65535)
        check_int("max_total_recv_tokens", self.max_total_recv_tokens, 0)
        check_int("gpu_per_node", self.gpu_per_node, 1)
        check_int("rdma_block_num", self.rdma_block_num, 0)
        check_int("num_qp_per_pe", self.num_qp_per_pe, 1)
        if self.gpu_per_node & (self.gpu_per_node - 1):
            raise EpConfigError(f"gpu_per_node={self.gpu_per_node} must be a power of 2")
        if self.world_size % self.gpu_per_node and self.world_size > self.gpu_per_node:
            raise EpConfigError(f"gpu_per_node={self.gpu_per_node} must divide world_size={self.world_size}")
        try:
            self.kernel_type = EpDispatchCombineKernelType(self.kernel_type)
        except ValueError:
            raise EpConfigError(
                f"kernel_type={self.kernel_type!r} is not one of {[k.name for k in EpDispatchCombineKernelType]}"
            ) from None
        if self.quant_type not in QUANT_TYPES:
            raise EpConfigError(f"quant_type={self.quant_type!r} is not one of {list(QUANT_TYPES)}")
        if self.scale_dim and not self.scale_type_size:
            raise EpConfigError(f"scale_dim={self.scale_dim} needs scale_type_size > 0")
        rows = self.world_size * self.max_num_inp_token_per_rank
        if rows * max(self.hidden_dim * self.max_token_type_size, 1) >= 1 << 62:
            raise EpConfigError("world_size * max_num_inp_token_per_rank * hidden_dim is too large to address")

    @property
    def quant(self) -> EpDispatchCombineQuantType:
        return QUANT_TYPES[self.quant_type]

    @property
    def routing_group(self) -> int:
        """PEs per routing node of an inter-node kernel type (a record crosses to each node once):
        ``gpu_per_node`` for the rail-proxy types, 1 for InterNode and AsyncLL; 0 for intra-node."""
        if self.kernel_type in RAIL_PROXY_KERNEL_TYPES:
            return min(self.gpu_per_node, self.world_size)
        return 1 if self.kernel_type in INTER_NODE_KERNEL_TYPES else 0

    @property
    def total_experts(self) -> int:
        return self.world_size * self.num_experts_per_rank

    def max_num_tokens_to_send_per_rank(self) -> int:
        return self.max_num_inp_token_per_rank

    def max_num_tokens_to_send(self) -> int:
        return self.world_size * self.max_num_inp_token_per_rank

    def max_num_tokens_to_recv_per_rank(self) -> int:
        """Rows reserved per source PE: ``min(ceil(max_total_recv_tokens / world_size), M)``, or M."""
        if self.max_total_recv_tokens <= 0:
            return self.max_num_inp_token_per_rank
        return min(-(-self.max_total_recv_tokens // self.world_size), self.max_num_inp_token_per_rank)

    def max_num_tokens_to_recv(self) -> int:
        return self.world_size * self.max_num_tokens_to_recv_per_rank()
