# SPDX-License-Identifier: MIT
"""Deterministic EP inputs, shared by the benchmark and the tests: any PE can rebuild any other
PE's tokens, weights, scales and routing from (seed, rank), which is what lets a test check a
received row against its source without moving the source around."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Routing patterns: uniform top-k without repeats, or skewed towards a few hot experts.
ROUTINGS = ("random", "hot")
#: Where -1 ("no expert") entries go: none, every other pick of every other token, or the last pick.
SENTINELS = ("none", "every_other", "last")


@dataclass(frozen=True)
class Workload:
    world_size: int
    max_tokens: int
    hidden: int
    topk: int
    experts_per_rank: int
    dtype: str = "bfloat16"
    scale_dim: int = 0
    scale_dtype: str = "float32"
    routing: str = "random"
    sentinel: str = "none"
    tokens: int | None = None  # None: a random count in [0, max_tokens] per rank
    seed: int = 123
    outliers: float = 1.0  # multiplies the first quarter of every row (pushes fp8 blocks out of range)
    #: "none": rows of ``dtype``; a mori.ep.payload_formats name ("mxfp4", "nvfp4", "mxfp8"): bf16
    #: rows quantised to it (payload and scales, see with_payload); "uint8": random bytes.
    payload: str = "none"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_experts(self) -> int:
        return self.world_size * self.experts_per_rank


def _generator(workload: Workload, rank: int, iteration: int) -> Any:
    import torch

    return torch.Generator().manual_seed(workload.seed * 1_000_003 + rank * 7919 + iteration)


def token_count(workload: Workload, rank: int, iteration: int = 0) -> int:
    import torch

    if workload.tokens is not None:
        return workload.tokens
    return int(
        torch.randint(0, workload.max_tokens + 1, (1,), generator=_generator(workload, rank, iteration + 10_000))
    )


def routing(workload: Workload, rank: int, iteration: int = 0) -> Any:
    """int32 [N, topk]: distinct experts per token, with the workload's -1 entries."""
    import torch

    gen = _generator(workload, rank, iteration)
    n, experts = token_count(workload, rank, iteration), workload.total_experts
    if workload.routing == "hot":
        # Zipf-like popularity: expert e is picked with weight 1/(e+1), over a shuffled order.
        popularity = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64)
        popularity = popularity[torch.randperm(experts, generator=gen)]
        indices = torch.multinomial(popularity.expand(max(n, 1), experts), workload.topk, generator=gen)[:n]
    else:
        indices = torch.rand(n, experts, generator=gen).argsort(dim=1)[:, : workload.topk]
    indices = indices.to(torch.int32)
    if workload.sentinel == "every_other":
        indices[::2, 1::2] = -1
    elif workload.sentinel == "last":
        indices[:, -1] = -1
    return indices.contiguous()


def with_payload(workload: Workload, payload: str) -> Workload:
    """``workload`` with rows of a block-scaled payload format (dtype and scales follow from it)
    or of raw bytes ("uint8": ``hidden`` bytes a row, no scales)."""
    from dataclasses import replace

    if payload == "uint8":
        return replace(workload, payload=payload, dtype="uint8")
    from mori.ep.payload_formats import FORMATS

    fmt = FORMATS[payload]
    return replace(
        workload, payload=payload, dtype=fmt.payload_dtype, scale_dim=workload.hidden // fmt.block,
        scale_dtype=fmt.scale_dtype,
    )  # fmt: skip


def source_rows(workload: Workload, rank: int, iteration: int = 0) -> Any:
    """The rows before any payload format: [N, hidden] float32 (bf16 values for a payload format)."""
    import torch

    gen = _generator(workload, rank, iteration + 20_000)
    x = torch.randn(token_count(workload, rank, iteration), workload.hidden, generator=gen)
    x[:, : workload.hidden // 4] *= workload.outliers
    return x.to(torch.bfloat16).float() if workload.payload != "none" else x


def tokens(workload: Workload, rank: int, iteration: int = 0) -> tuple[Any, Any, Any]:
    """(x [N, hidden] of the workload's dtype, weights [N, topk] f32, scales [N, scale_dim] | None);
    a payload format's x is its payload ([N, hidden/2] for fp4) and scales its block scales."""
    import torch

    gen = _generator(workload, rank, iteration + 20_000)
    n = token_count(workload, rank, iteration)
    x = torch.randn(n, workload.hidden, generator=gen)
    weights = torch.rand(n, workload.topk, generator=gen)
    scales = None
    if workload.payload == "uint8":
        raw = torch.randint(0, 256, (n, workload.hidden + workload.scale_dim), generator=gen, dtype=torch.uint8)
        if workload.scale_dim:
            scales = raw[:, workload.hidden :].contiguous().view(getattr(torch, workload.scale_dtype))
        return raw[:, : workload.hidden].contiguous(), weights, scales
    if workload.payload != "none":
        from mori.ep.payload_formats import quantize

        payload, scales = quantize(source_rows(workload, rank, iteration).to(torch.bfloat16), workload.payload)
        return payload, weights, scales
    x[:, : workload.hidden // 4] *= workload.outliers
    x = x.to(getattr(torch, workload.dtype))
    if workload.scale_dim:
        scales = torch.rand(n, workload.scale_dim, generator=gen).to(getattr(torch, workload.scale_dtype))
    return x, weights, scales


def destinations(workload: Workload, indices: Any) -> Any:
    """bool [N, world_size]: which PEs each token goes to (distinct PEs of its valid experts)."""
    import torch

    # Invalid picks name an extra column that is dropped at the end.
    pes = torch.where(indices >= 0, indices // workload.experts_per_rank, workload.world_size).long()
    dest = torch.zeros(indices.shape[0], workload.world_size + 1, dtype=torch.bool)
    dest.scatter_(1, pes, True)
    return dest[:, : workload.world_size]
