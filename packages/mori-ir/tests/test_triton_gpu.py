# SPDX-License-Identifier: MIT
"""mori-ir's Triton frontend on a GPU: Triton kernels moving data between PEs through mori-shmem.

The PEs are separate processes sharing the GPU under MPS (MORI_SHMEM_BACKEND=cuda); each runs a
program of triton_programs.py that launches kernels of triton_kernels.py and checks the results
against references of its own. Skips without a GPU, without triton or torch, or without a bitcode.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

pytest.importorskip("triton", reason="the Triton frontend needs triton: pip install triton")
pytest.importorskip("torch", reason="the Triton GPU tests allocate and check through torch")

from mori.shmem.testing import run_pes

import triton_programs

ENV = {
    "MORI_SHMEM_BACKEND": "cuda",
    "MORI_SHMEM_HEAP_SIZE": "256M",
    # A wait that is never satisfied ends the kernel with an error the PE raises, well before the
    # run_pes timeout.
    "MORI_SHMEM_DEVICE_SPIN_TIMEOUT": "20",
}
TIMEOUT = 300
SIGNAL_SET, SIGNAL_ADD = 9, 10


@pytest.fixture
def gpu_env(request, gpu_available) -> dict[str, str]:
    """The PEs' environment; skips without a GPU or a bitcode (resolved once, here, for all PEs)."""
    if not gpu_available:
        pytest.skip("no GPU: the Triton kernels run on the cuda backend only")
    return {**ENV, "MORI_SHMEM_BC": request.getfixturevalue("bitcode_path")}


def _run(program, nranks, *args, env, timeout=TIMEOUT):
    return run_pes(program, nranks, *args, env=env, timeout=timeout)


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4])
def test_put_signal_wait_moves_the_bytes_and_the_signal(gpu_env, nranks):
    cases = []
    sizes = [(1, 0, 0), (13, 3, 5), (4096 + 5, 8, 1), (65536 + 3, 1, 7)]
    for scope in range(3):  # thread, warp, block
        for sig_op in (SIGNAL_SET, SIGNAL_ADD):
            for wait_gt in (0, 1):  # uint64_wait_until_equals, uint64_wait_until_greater_than
                cases += [(scope, sig_op, wait_gt, n, dst_off, src_off) for n, dst_off, src_off in sizes]
    assert _run(triton_programs.put_signal_wait, nranks, cases, env=gpu_env) == [len(cases)] * nranks


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4])
@pytest.mark.parametrize("shard_bytes", [1, 3 * 4096 + 17])
def test_triton_allgather_matches_the_concatenation_of_every_shard(gpu_env, nranks, shard_bytes):
    rounds = 3
    want = []
    for round_no in range(rounds):
        shards = [triton_programs.allgather_shard(round_no, pe, shard_bytes) for pe in range(nranks)]
        want.append(hashlib.sha256(np.concatenate(shards).tobytes()).hexdigest())
    results = _run(triton_programs.allgather, nranks, shard_bytes, rounds, env=gpu_env)
    assert results == [want] * nranks


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4])
def test_every_device_function_from_triton(gpu_env, nranks):
    # put_signal_wait covers the remaining three (putmem_nbi_signal_thread/warp/block).
    want = {"query": 4, "quiet_fence": 6, "barrier": 2, "rma": 48, "immediate": 8, "atomic": 13, "wait": 16}
    assert sum(want.values()) + 3 == 100
    assert _run(triton_programs.every_function, nranks, env=gpu_env) == [want] * nranks


@pytest.mark.gpu
def test_without_the_hook_a_kernel_sees_an_empty_state(gpu_env):
    """The control for the hook: a module nobody initialised reads zeros (n_pes() == 0)."""
    for out in _run(triton_programs.query_only, 2, False, env=gpu_env):
        assert out["n_pes"] == 0


@pytest.mark.gpu
def test_the_hook_initialises_kernels_loaded_from_the_disk_cache(gpu_env, tmp_path):
    env = {**gpu_env, "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
    first = _run(triton_programs.query_only, 2, True, env=env)
    second = _run(triton_programs.query_only, 2, True, env=env)  # new processes, same cache
    for rank, out in enumerate(first + second):
        assert (out["my_pe"], out["n_pes"]) == (rank % 2, 2), out
    for out in second:
        assert out["cache_hits"] == [True], f"the second run compiled again: {out}"
