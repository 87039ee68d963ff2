# SPDX-License-Identifier: MIT
"""mori.jax: dispatch and combine inside jax.jit, as XLA FFI custom calls, on 2 and 4 PE
processes, against the torch reference of the other EP tests (jax_programs.py); the cuda backend
where a GPU is visible (marked gpu)."""

from __future__ import annotations

import subprocess
import sys

import ep_programs
import jax_programs
import pytest

from mori.ep.workload import Workload
from mori.shmem.testing import run_pes

pytest.importorskip("jax", reason="mori.jax needs jax (the mori-ep[jax] extra); CI's test-ep session installs it")

BASE = Workload(world_size=2, max_tokens=32, hidden=64, topk=4, experts_per_rank=4, tokens=None)


def _env(backend: str) -> dict[str, str]:
    # One PE per process: on a GPU they share it, so jax must not preallocate most of its memory.
    platform = "cuda" if backend == "cuda" else "cpu"
    return {"MORI_SHMEM_BACKEND": backend, "JAX_PLATFORMS": platform, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}


def _run(backend: str, w: Workload, **options: object) -> list[list[int]]:
    return run_pes(
        jax_programs.dispatch_combine, w.world_size, backend, w, dict(options), env=_env(backend), timeout=240
    )


@pytest.mark.parametrize("world_size", [2, 4])
def test_jit_dispatch_combine_bf16(backend: str, world_size: int) -> None:
    w = ep_programs.spread(BASE, world_size)
    totals = _run(backend, w)
    ep_programs.assert_moves_rows(totals)


@pytest.mark.parametrize("kernel_type", [0, 5], ids=["IntraNode", "IntraNodeLL"])
def test_jit_fp8_dispatch_with_scales_fp32_combine(backend: str, kernel_type: int) -> None:
    w = ep_programs.replace(BASE, world_size=4, **ep_programs.FP8_WITH_SCALES)
    _run(backend, w, kernel_type=kernel_type, combine_dtype="float32")


def test_jit_fp8_direct_cast_combine_from_mori_cpp_config(backend: str) -> None:
    _run(backend, BASE, quant_type="fp8_direct_cast", cpp_config=True)


@pytest.mark.parametrize(
    "kernel_type",
    [
        pytest.param(1, id="InterNode"),
        pytest.param(2, id="InterNodeV1"),
        # The other two inter-node types: about 2 minutes each on a loaded 2-core machine, so slow.
        pytest.param(3, id="InterNodeV1LL", marks=pytest.mark.slow),
        pytest.param(4, id="AsyncLL", marks=pytest.mark.slow),
    ],
)
def test_jit_inter_node_on_simulated_hosts(kernel_type: int) -> None:
    """Two hosts of two PEs each on the cpu backend (the remote transport over loopback)."""
    w = ep_programs.replace(BASE, world_size=4)
    env = {**_env("cpu"), "MORI_SHMEM_PES_PER_NODE": "2"}
    run_pes(
        jax_programs.dispatch_combine,
        4,
        "cpu",
        w,
        {"kernel_type": kernel_type, "gpu_per_node": 2},
        env=env,
        timeout=240,
    )


def test_bad_calls_raise_typed_errors() -> None:
    results = run_pes(jax_programs.bad_calls, 2, "cpu", BASE, env=_env("cpu"), timeout=240)
    for messages in results:
        outcome = {line.split("|")[0]: line.split("|")[1:] for line in messages}
        for name in ("indices_int16", "too_many_tokens", "hidden_too_large", "weights_shape", "combine_hidden"):
            assert outcome[name][0] == "EpInputError", (name, outcome[name])
        assert "int16" in outcome["indices_int16"][1] and "int32" in outcome["indices_int16"][1]
        assert "33 rows" in outcome["too_many_tokens"][1] and "32" in outcome["too_many_tokens"][1]
        assert "multiple of 8" in outcome["combine_hidden"][1]
        kind, text = outcome["expert_out_of_range"]
        assert kind != "no error" and "mori_ep EpInputError" in text and "expert id" in text, outcome
        assert outcome["after"][1] == "None", outcome["after"]


def test_importing_mori_ep_does_not_import_jax() -> None:
    code = "import sys, mori.ep, mori.ops; assert 'jax' not in sys.modules, 'jax imported'"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_jax_example_runs(backend: str) -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "jax_dispatch_combine.py"
    result = subprocess.run(
        [sys.executable, str(example), "--pes", "2", "--platform", backend],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "all 2 PEs match 2 * U * x" in result.stderr


def test_shmem_init_attr_over_jax_distributed() -> None:
    """MORI's start-up: jax.distributed (its coordinator on loopback) carries mori.shmem's unique id."""
    from mori.shmem.testing import find_free_port

    totals = run_pes(jax_programs.distributed_init, 2, find_free_port(), BASE, env=_env("cpu"), timeout=240)
    assert len(totals) == 2


def test_dead_peer_fails_the_call_after_the_timeout() -> None:
    env = {**_env("cpu"), "MORI_EP_TIMEOUT": "2"}
    results = run_pes(jax_programs.stall_one_rank, 2, "cpu", BASE, env=env, timeout=120)
    assert results[1] == "stalled"
    assert "mori_ep EpTimeoutError" in results[0], results[0]
    seconds = float(results[0].split(" after ")[1].split("s:")[0])
    assert 1.5 <= seconds < 7, results[0]
