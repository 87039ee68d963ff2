# SPDX-License-Identifier: MIT
"""All-reduce (one-shot, two-shot, fp8 wire), all-gather and all-to-all against torch.distributed
(gloo) on the same inputs, in 2, 4 and 8 processes."""

from __future__ import annotations

import cco_programs
import pytest
from conftest import backend_env

from mori.shmem.testing import find_free_port, run_pes


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_collectives_match_gloo(backend: str, nranks: int) -> None:
    failures = run_pes(
        cco_programs.collectives, nranks, backend, find_free_port(), env=backend_env(backend), timeout=280
    )
    assert failures == [[]] * nranks, failures


@pytest.mark.parametrize(("nranks", "per_node"), [(2, 1), (4, 2), (8, 4)])
def test_collectives_across_nodes_match_gloo(backend: str, nranks: int, per_node: int) -> None:
    """The same checks with one host standing for several nodes: node-local steps plus the
    exchange between nodes over the GDA path."""
    env = backend_env(backend, per_node)
    failures = run_pes(cco_programs.collectives, nranks, backend, find_free_port(), env=env, timeout=280)
    assert failures == [[]] * nranks, failures


def test_dead_peer_across_nodes_gives_errors_not_a_hang(backend: str) -> None:
    """The last rank leaves: its node-mate's barrier and the other node's exchange both time out
    (or see the lost peer) instead of waiting forever."""
    env = backend_env(backend, 2, MORI_CCO_TIMEOUT="3")
    results = run_pes(cco_programs.dead_peer, 4, backend, env=env, timeout=120, return_exceptions=True)
    for rank in (0, 1, 2):
        assert any(word in str(results[rank]) for word in ("Timeout", "Device", "PeerLost")), results[rank]


@pytest.mark.parametrize(("nranks", "per_node"), [(2, 0), (4, 0), (4, 2)])
def test_gemm_all_reduce_matches_matmul_then_all_reduce(backend: str, nranks: int, per_node: int) -> None:
    env = backend_env(backend, per_node)
    results = run_pes(cco_programs.gemm_all_reduce, nranks, backend, find_free_port(), env=env, timeout=120)
    for errors in results:
        for name in ("chunks1", "chunks2", "chunks4"):
            assert errors[name] < 1e-3, errors
        # Quantised: not exact, but within e4m3's few-percent envelope.
        assert 0 < errors["fp8_rel"] < 0.06, errors


@pytest.mark.parametrize("nranks", [2, 4])
def test_copy_engine_puts_signal_their_peer(backend: str, nranks: int) -> None:
    assert run_pes(cco_programs.copy_engine, nranks, backend, env=backend_env(backend), timeout=120) == [True] * nranks


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 8])
def test_collectives_replay_in_a_cuda_graph(nranks: int) -> None:
    from mori.testing.pytest_plugin import cuda_available as gpu_available

    if not gpu_available():
        pytest.skip("CUDA graphs need the cuda backend: no NVIDIA GPU here")
    results = run_pes(cco_programs.graph_replay, nranks, "cuda", env=backend_env("cuda"), timeout=120)
    # Two all-reduces per replay: the sum of the ranks' values, times nranks.
    expect = [float(nranks * sum(r + replay for r in range(nranks))) for replay in range(8)]
    assert results == [expect] * nranks
