# SPDX-License-Identifier: MIT
"""The cuda backend through the host API: GPU heap, CUDA IPC / VMM sharing, host RMA on GPU memory.

Runs on a machine with a GPU (several PEs share it; start MPS first, see docs/developer-guide/gpu.md);
skips elsewhere with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mori.shmem import get_include
from mori.shmem.testing import run_pes

import gpu_programs
from pe_programs import pattern

pytestmark = pytest.mark.gpu

HEAP = "64M"


@pytest.fixture(autouse=True)
def _needs_gpu(gpu_available):
    if not gpu_available:
        pytest.skip("no GPU: the cuda backend needs a CUDA driver and a visible device")


def _env(mode: str) -> dict[str, str]:
    return {"MORI_SHMEM_BACKEND": "cuda", "MORI_SHMEM_MODE": mode, "MORI_SHMEM_HEAP_SIZE": HEAP}


@pytest.mark.parametrize("mode", ["static_heap", "vmm_heap"])
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_host_rma_on_gpu_heap(nranks, mode):
    nbytes = 4096 + 37
    results = run_pes(gpu_programs.host_rma, nranks, nbytes, env=_env(mode), timeout=180)
    for rank, out in enumerate(results):
        prv, nxt = (rank - 1) % nranks, (rank + 1) % nranks
        assert out["backend"] == "cuda"
        np.testing.assert_array_equal(out["received"], pattern(prv, nbytes))
        np.testing.assert_array_equal(out["received_signalled"], pattern(100 + prv, nbytes))
        assert out["signal"] == 7
        # PE rank read PE prv's buf, which PE prv-1 had put its pattern into.
        np.testing.assert_array_equal(out["readback"], pattern((prv - 1) % nranks, nbytes))
        assert out["filled"] == prv + 1
        assert out["after_swap"] == -(prv + 1)
        assert out["swapped"] == (results[0]["total"] if nxt == 0 else 0)
    olds = sorted(out["fetch_add_old"] for out in results)
    assert results[0]["total"] == sum(r + 1 for r in range(nranks))
    # fetch_add returns distinct prefix sums of the increments, whatever order the PEs ran in.
    assert len(set(olds)) == nranks and olds[0] == 0


def _device_state_version() -> int:
    """MORI_SHMEM_DEVICE_STATE_VERSION as the installed header defines it."""
    header = (Path(get_include()) / "mori_shmem" / "device_state.h").read_text()
    match = re.search(r"#define MORI_SHMEM_DEVICE_STATE_VERSION (\d+)", header)
    assert match, "device_state.h defines no MORI_SHMEM_DEVICE_STATE_VERSION"
    return int(match.group(1))


@pytest.mark.parametrize("mode", ["static_heap", "vmm_heap"])
def test_device_state_describes_every_peer(mode):
    nranks = 4
    version = _device_state_version()
    states = run_pes(gpu_programs.module_state, nranks, env=_env(mode), timeout=120)
    for rank, state in enumerate(states):
        assert state["version"] == version
        assert (state["my_pe"], state["n_pes"]) == (rank, nranks)
        assert state["peers"][rank] == state["heap_base"]
        assert all(p != 0 for p in state["peers"])
        assert len(set(state["peers"])) == nranks, "each peer's heap is mapped at its own address"
        assert state["p2p"] == [p + 4096 for p in state["peers"]]
        assert state["heap_size"] >= 64 << 20


@pytest.mark.parametrize("nranks", [2, 8])
def test_barrier_on_stream_orders_every_pe(nranks):
    rounds = 5
    for out in run_pes(gpu_programs.stream_barriers, nranks, rounds, env=_env("static_heap"), timeout=180):
        assert out["seen"] == [[r] * nranks for r in range(1, rounds + 1)]
        assert out["module_init_without_global"] == -1
