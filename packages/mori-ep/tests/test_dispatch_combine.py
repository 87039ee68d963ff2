# SPDX-License-Identifier: MIT
"""Dispatch and combine across 2, 4 and 8 PE processes, against the torch reference of
ep_programs.py (exact for data movement; tolerances only where combine quantises to fp8)."""

from __future__ import annotations

import ep_programs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mori.ep.workload import Workload
from mori.shmem.testing import run_pes

BASE = Workload(world_size=2, max_tokens=32, hidden=64, topk=4, experts_per_rank=4, tokens=None)


def _run(
    backend: str, w: Workload, timeout: float = 240.0, env: dict[str, str] | None = None, **options: object
) -> list[list[int]]:
    env = {"MORI_SHMEM_BACKEND": backend, **(env or {})}
    return run_pes(ep_programs.dispatch_combine, w.world_size, backend, w, dict(options), env=env, timeout=timeout)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_random_routing_bf16(backend: str, world_size: int) -> None:
    w = ep_programs.spread(BASE, world_size)
    totals = _run(backend, w)
    ep_programs.assert_moves_rows(totals)


@pytest.mark.parametrize("kernel_type", [0, 5], ids=["IntraNode", "IntraNodeLL"])
def test_fp8_dispatch_with_scales_bf16_combine(backend: str, kernel_type: int) -> None:
    w = ep_programs.replace(BASE, world_size=4, **ep_programs.FP8_WITH_SCALES)
    _run(backend, w, kernel_type=kernel_type)


def test_fp32_tokens_and_fp32_combine(backend: str) -> None:
    w = ep_programs.replace(BASE, dtype="float32", hidden=32)
    _run(backend, w, combine_dtype="float32")


@pytest.mark.parametrize("sentinel", ["every_other", "last"])
def test_minus_one_entries_and_hot_experts(backend: str, sentinel: str) -> None:
    w = ep_programs.replace(BASE, world_size=4, routing="hot", sentinel=sentinel, topk=4, experts_per_rank=8)
    _run(backend, w)


@pytest.mark.parametrize("tokens", [0, 1, 32])
def test_token_counts_from_none_to_max(backend: str, tokens: int) -> None:
    _run(backend, ep_programs.replace(BASE, tokens=tokens))


def test_zero_copy_combine(backend: str) -> None:
    _run(backend, ep_programs.replace(BASE, world_size=4), zero_copy=True)


@pytest.mark.parametrize("quant", ["fp8_direct_cast", "fp8_blockwise"])
def test_fp8_combine_formats(backend: str, quant: str) -> None:
    # Large values push some blocks past fp8's range, so the blockwise scales are exercised.
    w = ep_programs.replace(BASE, hidden=128, dtype="bfloat16", outliers=1000.0, extra={"quant_blocks": 4})
    _run(backend, w, quant_type=quant, env={"MORI_FP8_COMBINE_SCALE_DIM": "4"})


def test_max_total_recv_tokens_at_capacity(backend: str) -> None:
    # Every token to every PE at most once: 2 PEs x 32 tokens fit exactly in a cap of 64.
    w = ep_programs.replace(BASE, tokens=32, topk=2, experts_per_rank=1)
    _run(backend, w, max_total_recv_tokens=64)


@pytest.mark.slow
def test_many_iterations_eight_pes(backend: str) -> None:
    w = ep_programs.replace(BASE, world_size=8, max_tokens=128, hidden=256, topk=8, experts_per_rank=4)
    _run(backend, w, iterations=6, timeout=600)


@settings(max_examples=6, deadline=None)
@given(
    world_size=st.sampled_from([2, 4]),
    topk=st.integers(1, 8),
    hidden=st.sampled_from([8, 64, 200]),
    seed=st.integers(0, 1000),
    routing=st.sampled_from(["random", "hot"]),
    sentinel=st.sampled_from(["none", "every_other", "last"]),
)
def test_hypothesis_shapes_and_routings(
    world_size: int, topk: int, hidden: int, seed: int, routing: str, sentinel: str
) -> None:
    experts_per_rank = max(1, -(-topk // world_size)) + 1
    w = Workload(
        world_size=world_size,
        max_tokens=16,
        hidden=hidden,
        topk=topk,
        experts_per_rank=experts_per_rank,
        routing=routing,
        sentinel=sentinel if topk > 1 else "none",
        seed=seed,
    )
    _run("cpu", w)


@pytest.mark.gpu
@pytest.mark.parametrize("world_size", [2, 8])
def test_cuda_graph_capture_and_replay(backend: str, world_size: int) -> None:
    if backend != "cuda":
        pytest.skip("CUDA graphs exist on the cuda backend only")
    w = ep_programs.replace(BASE, world_size=world_size, tokens=24, experts_per_rank=2)
    totals = run_pes(ep_programs.graph_replay, world_size, backend, w, 3, env={"MORI_SHMEM_BACKEND": backend})
    assert all(len(t) == 3 for t in totals)


@pytest.mark.parametrize("world_size", [2, 4])
def test_routing_handle_replay_and_combine(backend: str, world_size: int) -> None:
    w = ep_programs.replace(BASE, world_size=world_size, tokens=20)
    totals = run_pes(ep_programs.routing_replay, world_size, backend, w, env={"MORI_SHMEM_BACKEND": backend})
    assert sum(totals) > 0


@pytest.mark.parametrize("world_size", [2, 4])
def test_standard_moe_layout_round_trip(backend: str, world_size: int) -> None:
    w = ep_programs.replace(BASE, world_size=world_size, tokens=24, sentinel="last")
    counts = run_pes(ep_programs.standard_moe, world_size, backend, w, env={"MORI_SHMEM_BACKEND": backend})
    assert sum(sum(c) for c in counts) > 0
