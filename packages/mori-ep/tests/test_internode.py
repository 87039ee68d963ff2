# SPDX-License-Identifier: MIT
"""The inter-node kernel types across 2 "hosts" on one machine: mori-shmem's node-id override
(MORI_SHMEM_PES_PER_NODE) makes PEs of different nodes reach each other only through its remote
transport, so every record and reply that crosses nodes goes over it, as between real hosts.
Checked against the same torch reference as the intra-node types (ep_programs.py)."""

from __future__ import annotations

import ep_programs
import pytest

from mori.ep.workload import Workload
from mori.shmem.proxy_hazards import NEEDED_ENV
from mori.shmem.testing import run_pes

BASE = Workload(world_size=4, max_tokens=24, hidden=64, topk=4, experts_per_rank=3, tokens=None)
KERNEL_TYPES = {"InterNode": 1, "InterNodeV1": 2, "InterNodeV1LL": 3, "AsyncLL": 4}


def _env(backend: str, per_node: int, **extra: str) -> dict[str, str | None]:
    """Hosts of per_node PEs, with the CUDA settings these types need on the GPU (proxy_hazards)."""
    env = {"MORI_SHMEM_BACKEND": backend, "MORI_SHMEM_PES_PER_NODE": str(per_node)}
    return {**env, **NEEDED_ENV, **extra}


def _run(backend: str, w: Workload, per_node: int, timeout: float = 240.0, **options: object) -> list[list[int]]:
    options.setdefault("gpu_per_node", per_node)
    env = _env(backend, per_node)
    return run_pes(ep_programs.dispatch_combine, w.world_size, backend, w, dict(options), env=env, timeout=timeout)


# Every type on 2 hosts of 1 and of 2 PEs; with 4 PEs per host only InterNodeV1 in the default run
# (the others under -m slow), to keep CI short on 2 cores.
TWO_HOSTS = [
    pytest.param(
        kernel_type, world_size, per_node,
        id=f"{name}-2x{per_node}",
        marks=[pytest.mark.slow] if per_node == 4 and name != "InterNodeV1" else [],
    )
    for name, kernel_type in KERNEL_TYPES.items()
    for world_size, per_node in ((2, 1), (4, 2), (8, 4))
]  # fmt: skip


@pytest.mark.parametrize(("kernel_type", "world_size", "per_node"), TWO_HOSTS)
def test_two_hosts_match_the_reference(backend: str, kernel_type: int, world_size: int, per_node: int) -> None:
    w = ep_programs.spread(BASE, world_size)
    totals = _run(backend, w, per_node, kernel_type=kernel_type, iterations=3)
    ep_programs.assert_moves_rows(totals)


@pytest.mark.parametrize("kernel_type", list(KERNEL_TYPES.values()), ids=list(KERNEL_TYPES))
def test_a_second_combine_without_a_dispatch_is_refused(backend: str, kernel_type: int) -> None:
    """Two combines in a row could race across hosts (docs/user-guide/ep.md): the second raises
    EpInputError before sending anything, and the next dispatch and combine match the reference."""
    w = ep_programs.replace(BASE, world_size=2)
    _run(backend, w, 1, kernel_type=kernel_type, iterations=2, combine_twice=True)


@pytest.mark.parametrize("kernel_type", [2, 4], ids=["InterNodeV1", "AsyncLL"])
def test_fp8_dispatch_with_scales_and_fp8_combine(backend: str, kernel_type: int) -> None:
    w = ep_programs.replace(BASE, **ep_programs.FP8_WITH_SCALES, extra={"quant_blocks": 4})
    _run(backend, w, 2, kernel_type=kernel_type, quant_type="fp8_direct_cast")


@pytest.mark.parametrize("kernel_type", [1, 3], ids=["InterNode", "InterNodeV1LL"])
def test_hot_experts_sentinels_and_zero_copy(backend: str, kernel_type: int) -> None:
    w = ep_programs.replace(BASE, routing="hot", sentinel="every_other", experts_per_rank=4)
    _run(backend, w, 2, kernel_type=kernel_type, zero_copy=True)


def test_standard_moe_layout_round_trip_across_hosts(backend: str) -> None:
    env = _env(backend, 2)
    w = ep_programs.replace(BASE, tokens=20, sentinel="last")
    fields = {"kernel_type": KERNEL_TYPES["InterNodeV1"], "gpu_per_node": 2}
    counts = run_pes(ep_programs.standard_moe, 4, backend, w, fields, env=env, timeout=240)
    assert sum(sum(c) for c in counts) > 0


def test_no_tokens_and_fp32(backend: str) -> None:
    _run(backend, ep_programs.replace(BASE, tokens=0), 2, kernel_type=2)
    _run(backend, ep_programs.replace(BASE, dtype="float32", hidden=32), 2, kernel_type=2, combine_dtype="float32")


@pytest.mark.parametrize("kernel_type", [1, 2], ids=["InterNode", "InterNodeV1"])
def test_a_host_that_stops_answering_times_out(backend: str, kernel_type: int) -> None:
    env = _env(backend, 1, MORI_EP_TIMEOUT="2")
    w = ep_programs.replace(BASE, world_size=2, tokens=8)
    fields = {"kernel_type": kernel_type, "gpu_per_node": 1}
    results = run_pes(ep_programs.stall_one_rank, 2, backend, w, fields, env=env, timeout=120)
    assert results[1] == "stalled"
    assert results[0].startswith("EpTimeoutError"), results[0]
    seconds = float(results[0].split(" after ")[1].split("s:")[0])
    assert 1.5 <= seconds < 30, results[0]


def test_intra_node_types_refuse_remote_peers_and_gpu_per_node_must_match(backend: str) -> None:
    env = _env(backend, 1)
    w = ep_programs.replace(BASE, world_size=2)
    results = run_pes(ep_programs.make_op_error, 2, backend, w, {"kernel_type": 0}, env=env)
    assert all(r.startswith("EpUnsupportedError") and "InterNodeV1" in r for r in results), results
    results = run_pes(ep_programs.make_op_error, 2, backend, w, {"kernel_type": 2, "gpu_per_node": 2}, env=env)
    assert all(r.startswith("EpConfigError") and "gpu_per_node=2" in r for r in results), results


def test_lazy_module_loading_is_refused(backend: str) -> None:
    """Lazy loading stalls the device proxy's waits (mori.shmem.proxy_hazards); the cpu backend has
    no device proxy."""
    w = ep_programs.replace(BASE, world_size=2)
    env = _env(backend, 1, CUDA_MODULE_LOADING="LAZY")
    results = run_pes(ep_programs.make_op_error, 2, backend, w, {"kernel_type": 1, "gpu_per_node": 1}, env=env)
    if backend == "cpu":
        assert results == ["no error", "no error"], results
    else:
        assert all(r.startswith("EpConfigError") and "CUDA_MODULE_LOADING" in r for r in results), results


def test_async_ll_halves_out_of_order_raise(backend: str) -> None:
    env = _env(backend, 1)
    w = ep_programs.replace(BASE, world_size=2, tokens=8)
    for messages in run_pes(ep_programs.split_misuse, 2, backend, w, env=env, timeout=120):
        recv, combine_recv, twice, combine_early = messages
        assert recv.startswith("EpInputError") and "none is pending" in recv, recv
        assert combine_recv.startswith("EpInputError") and "none is pending" in combine_recv, combine_recv
        assert twice.startswith("EpInputError") and "dispatch_send was called twice" in twice, twice
        assert combine_early.startswith("EpInputError") and "_recv half" in combine_early, combine_early


# Routing handles across hosts: the intra-node replay test (ep_programs.routing_replay) on the same
# hosts as above (2 hosts of 4 PEs for InterNodeV1 by default, the others -m slow).
@pytest.mark.parametrize(("kernel_type", "world_size", "per_node"), TWO_HOSTS)
def test_routing_handle_replay_and_combine_across_hosts(
    backend: str, kernel_type: int, world_size: int, per_node: int
) -> None:
    w = ep_programs.spread(BASE, world_size, tokens=16)
    fields = {"kernel_type": kernel_type, "gpu_per_node": per_node}
    env = _env(backend, per_node)
    totals = run_pes(ep_programs.routing_replay, world_size, backend, w, fields, env=env, timeout=240)
    assert sum(totals) > 0


@pytest.mark.parametrize("kernel_type", [2, 4], ids=["InterNodeV1", "AsyncLL"])
def test_routing_handles_of_another_op_or_a_closed_one_raise(backend: str, kernel_type: int) -> None:
    w = ep_programs.replace(BASE, tokens=8)
    fields = {"kernel_type": kernel_type, "gpu_per_node": 2}
    hop_rows = 4 // (2 if kernel_type == KERNEL_TYPES["InterNodeV1"] else 1) * BASE.max_tokens  # nodes x M
    for messages in run_pes(ep_programs.routing_misuse, 4, backend, w, fields, env=_env(backend, 2), timeout=120):
        for name, needle in (
            ("stale", "routing is stale: it was made by another op"),
            ("wrong_tokens", "routing was made by a dispatch of 9 tokens; this call has 8"),
            ("no_inter_node_maps", f"routing.inter_node_disp_dest_tok_id_map must be int32 [{hop_rows}, 4]"),
            ("closed", "dispatch() on a closed op"),
            ("closed_op_handle", "routing is stale"),
        ):
            error = "EpOpClosedError" if name == "closed" else "EpRoutingError"
            assert messages[name].startswith(error) and needle in messages[name], (name, messages[name])
