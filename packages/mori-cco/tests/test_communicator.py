# SPDX-License-Identifier: MIT
"""Communicator lifecycle, symmetric memory, windows, peer access, threads and failures."""

from __future__ import annotations

import pickle

import cco_programs
import pytest
from conftest import backend_env

import mori.cco
from mori.shmem.testing import run_pes


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_memory_windows_and_peer_access(backend: str, nranks: int) -> None:
    results = run_pes(cco_programs.memory_and_windows, nranks, backend, env=backend_env(backend), timeout=120)
    offsets = {r["offsets"] for r in results}
    assert len(offsets) == 1, f"allocations landed at different offsets: {offsets}"
    a, b, again = offsets.pop()
    assert a % 256 == 0 and b % 4096 == 0
    assert again == a, "a freed block was not reused first-fit"
    assert len({r["window"] for r in results}) == 1
    for rank, result in enumerate(results):
        assert result["seen"] == [pe * 100 for pe in range(nranks)]
        assert result["written_by"] == (rank - 1) % nranks
        assert result["lsa"] == (rank, nranks, 1)
        assert result["backend"] == backend


def test_two_communicators_from_two_threads(backend: str) -> None:
    from mori.shmem import shmem_get_unique_id

    second = shmem_get_unique_id()
    results = run_pes(
        cco_programs.two_communicators_two_threads, 3, backend, second, env=backend_env(backend), timeout=120
    )
    # Rank r contributes r + 1 (+ 10 on the second communicator) to each all-reduce.
    assert results == [[6.0, 36.0]] * 3


def test_asymmetric_allocation_is_a_symmetry_error(backend: str) -> None:
    messages = run_pes(cco_programs.asymmetric_alloc, 2, backend, env=backend_env(backend))
    for message in messages:
        assert "alloc_mem" in message and "rank 1 passed (2048" in message, message


def test_exhausted_slot_names_the_limit(backend: str) -> None:
    for message in run_pes(cco_programs.exhausted_slot, 2, backend, env=backend_env(backend)):
        assert "per_rank_vmm" in message and str(64 << 20) in message, message


def test_bad_arguments_raise_before_anything_runs(backend: str) -> None:
    messages = run_pes(cco_programs.bad_arguments, 2, backend, env=backend_env(backend))[0]
    assert "no error" not in messages, messages
    expected = ["pe=2", "outside this rank's slot", "does not fit", "dtype", "op='prod'", "fp8", "algorithm",
                "world * input.numel()", "divisible", "contiguous", "communicator needs tensors on"]  # fmt: skip
    for needle, message in zip(expected, messages, strict=True):
        assert needle in message, (needle, message)


def test_dead_peer_gives_an_error_not_a_hang(backend: str) -> None:
    env = {**backend_env(backend), "MORI_CCO_TIMEOUT": "3"}
    results = run_pes(cco_programs.dead_peer, 3, backend, env=env, timeout=90, return_exceptions=True)
    for rank in (0, 1):
        assert "Timeout" in str(results[rank]) or "Device" in str(results[rank]), results[rank]


def test_unique_id_pickles_and_validates() -> None:
    uid = mori.cco.get_unique_id()
    assert bytes(pickle.loads(pickle.dumps(uid))) == bytes(uid)
    with pytest.raises(mori.cco.CcoInvalidArgumentError, match="expected 128"):
        mori.cco.UniqueId(b"short")


def test_init_rejects_bad_arguments_before_connecting() -> None:
    uid = mori.cco.get_unique_id()
    with pytest.raises(mori.cco.CcoInvalidArgumentError, match="rank=2 is outside"):
        mori.cco.Communicator.init(2, 2, uid)
    with pytest.raises(mori.cco.CcoInvalidArgumentError, match="backend='tpu'"):
        mori.cco.Communicator.init(1, 0, uid, backend="tpu")


def test_single_rank_communicator_runs_collectives_locally() -> None:
    import torch

    with mori.cco.Communicator.init(1, 0, mori.cco.get_unique_id(), backend="cpu") as comm:
        x = torch.arange(10.0)
        assert torch.equal(comm.all_reduce(x.clone()), x)
        assert comm.is_valid
    assert not comm.is_valid
    with pytest.raises(mori.cco.CcoInvalidArgumentError, match="destroyed"):
        comm.barrier()
