# SPDX-License-Identifier: MIT
"""Lifetime and bootstrap: init/finalize, rendezvous failures, torch and MPI bootstraps."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hostile_programs
import pytest

from mori.shmem.testing import PeFailure, RankError, find_free_port, run_pes

import pe_programs
from expectations import assert_error

TESTS_DIR = Path(__file__).resolve().parent


# ----------------------------------------------------------------------------- basic lifetime


@pytest.mark.parametrize("nranks", [1, 2, 4, 8])
def test_mype_npes(nranks: int) -> None:
    results = run_pes(pe_programs.identity, nranks, timeout=90)
    assert [r["mype"] for r in results] == list(range(nranks))
    assert all(r["npes"] == nranks for r in results)
    assert all(r["rc"] == 0 and r["finalize_rc"] == 0 for r in results)
    assert all(r["before"] is False and r["initialized"] is True and r["after"] is False for r in results)
    assert all(r["backend"] == "cpu" for r in results)


def test_unique_id_is_128_bytes_and_unique(shmem) -> None:
    a, b = shmem.shmem_get_unique_id(), shmem.shmem_get_unique_id()
    assert isinstance(a, bytes) and len(a) == 128 and len(b) == 128
    assert a != b


def test_unique_id_with_secret_changes_only_the_secret(shmem) -> None:
    uid = shmem.shmem_get_unique_id()
    forged = shmem.unique_id_with_secret(uid, bytes(32))
    assert len(forged) == 128 and forged != uid
    assert shmem.unique_id_with_secret(forged, bytes(32)) == forged
    with pytest.raises(shmem.InvalidArgumentError):
        shmem.unique_id_with_secret(uid, b"short")


@pytest.mark.parametrize("bad", [b"", b"x" * 127, b"x" * 129, bytes(128)])
def test_malformed_unique_id_is_rejected(shmem, bad: bytes) -> None:
    (err,) = run_pes(pe_programs.init_then_timeout, 1, 0, 1, uid=bad, timeout=60, env={"MORI_BOOTSTRAP_TIMEOUT": "3"})
    assert_error(err["error"], "InvalidArgumentError")
    assert err["elapsed"] < 2.0, "a malformed uid must be rejected before any network wait"


@pytest.mark.parametrize("nranks", [1, 2])
def test_init_twice_raises_already_initialized(nranks: int) -> None:
    for r in run_pes(pe_programs.init_twice, nranks, timeout=60):
        assert_error(r["second"], "AlreadyInitializedError")
        assert "RuntimeError" in r["second"]["mro"]
        assert r["still_usable"], "the failed second init broke the first"


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_finalize_then_reinit(nranks: int) -> None:
    results = run_pes(pe_programs.reinit_rounds, nranks, 3, timeout=120)
    for rank, rounds in enumerate(results):
        assert len(rounds) == 3
        for rnd in rounds:
            assert rnd["mype"] == rank and rnd["npes"] == nranks
            assert rnd["num_allocations_at_init"] == 0 and rnd["used_at_init"] == 0
            if rank == 0:
                assert rnd["total"] == nranks * (nranks + 1) // 2


def test_calls_before_init_raise_not_initialized() -> None:
    (out,) = run_pes(pe_programs.calls_before_init, 1, timeout=60)
    assert out.pop("is_initialized") is False
    for name, err in out.items():
        assert err is not None and err["type"] == "NotInitializedError", f"{name} before init: {err}"


def test_finalize_before_init_raises_not_initialized() -> None:
    (err,) = run_pes(pe_programs.finalize_before_init, 1, timeout=60)
    assert_error(err, "NotInitializedError")


@pytest.mark.parametrize("nranks", [1, 2])
def test_session_context_manager(nranks: int) -> None:
    results = run_pes(pe_programs.session_manager, nranks, timeout=60)
    for rank, r in enumerate(results):
        assert tuple(r["inside"]) == (True, rank, nranks)
        assert r["after"] is False


def test_session_context_manager_finalizes_on_exception() -> None:
    for r in run_pes(pe_programs.session_manager_exception, 2, timeout=60):
        assert r["raised"] is True and r["after"] is False


@pytest.mark.timeout(60)
def test_threads_as_pes_are_refused_at_once() -> None:
    """MORI's single-process multi-thread mode is not supported: of two threads that join one job,
    the second gets UnsupportedError at once; the first, whose peer never comes, times out with an
    error that says why, instead of both waiting silently."""
    (outcomes,) = run_pes(pe_programs.threads_as_pes, 1, 2, env={"MORI_BOOTSTRAP_TIMEOUT": "3"}, timeout=40)
    errors = sorted((o["error"] for o in outcomes), key=lambda e: e["type"])
    timed_out, refused = errors
    assert_error(refused, "UnsupportedError")
    assert "one PE per process" in refused["message"], refused["message"]
    assert_error(timed_out, "BootstrapTimeoutError")
    assert "another thread of this process asked to be rank" in timed_out["message"], timed_out["message"]
    fast = min(outcomes, key=lambda o: o["elapsed"])
    assert fast["error"]["type"] == "UnsupportedError" and fast["elapsed"] < 1.0, outcomes


# ----------------------------------------------------------------------------- rendezvous failures


@pytest.mark.timeout(60)
def test_root_waiting_for_a_peer_that_never_arrives() -> None:
    (r,) = run_pes(pe_programs.init_then_timeout, 1, 0, 2, env={"MORI_BOOTSTRAP_TIMEOUT": "3"}, timeout=40)
    assert_error(r["error"], "BootstrapTimeoutError")
    assert "TimeoutError" in r["error"]["mro"]
    assert 2.5 <= r["elapsed"] <= 10.0, f"timed out after {r['elapsed']:.1f} s, configured 3 s"
    assert r["initialized"] is False


@pytest.mark.timeout(60)
def test_peer_waiting_for_a_root_that_never_arrives() -> None:
    (r,) = run_pes(pe_programs.init_then_timeout, 1, 1, 2, env={"MORI_BOOTSTRAP_TIMEOUT": "3"}, timeout=40)
    assert_error(r["error"], "BootstrapTimeoutError")
    assert 2.5 <= r["elapsed"] <= 10.0, f"timed out after {r['elapsed']:.1f} s, configured 3 s"
    assert r["initialized"] is False


@pytest.mark.timeout(90)
def test_wrong_secret_is_rejected_and_the_job_completes(tmp_path: Path) -> None:
    results = run_pes(
        pe_programs.intruder_job,
        3,
        str(tmp_path / "intruder-done"),
        env={"MORI_BOOTSTRAP_TIMEOUT": "10"},
        timeout=60,
        return_exceptions=True,
    )
    legit0, legit1, intruder = results
    assert not isinstance(intruder, RankError), intruder
    assert_error(intruder["error"], "AuthenticationError")
    assert "PermissionError" in intruder["error"]["mro"]
    assert intruder["elapsed"] < 10.0
    for rank, r in enumerate((legit0, legit1)):
        assert not isinstance(r, RankError), f"legitimate rank {rank} failed: {r}\n{getattr(r, 'traceback', '')}"
        assert r["mype"] == rank and r["npes"] == 2
        assert r["total"] == 10 + 11


# Silent (and a few-bytes) clients at the root: the job must form at once, not after a deadline. 5
# fill a few of the 64 handshake slots; 100 fill them all and queue behind, so the root must evict.
@pytest.mark.timeout(90)
@pytest.mark.parametrize("silent", [5, 100])
def test_silent_clients_at_the_root_do_not_hold_up_the_rendezvous(silent: int) -> None:
    timeout_s = 30
    results = run_pes(
        hostile_programs.rendezvous_past_hostiles,
        2,
        silent,
        -1,
        env={"MORI_BOOTSTRAP_TIMEOUT": str(timeout_s)},
        timeout=60,
    )
    for rank, r in enumerate(results):
        assert r["error"] is None, f"rank {rank}: {r['error']}"
        assert r["allgather"] == [0, 1]
    # Well under the root's 5 s per-connection hello deadline: nobody waited for the hostile ones.
    assert results[1]["init_s"] < 4.0, f"rank 1 joined after {results[1]['init_s']:.1f} s"
    assert results[1]["garbage_status"] == hostile_programs.STATUS_AUTH


@pytest.mark.timeout(60)
def test_rendezvous_timeout_names_the_rank_that_is_missing() -> None:
    """Rank 1 arrives behind silent clients, rank 2 never does: the timeout blames rank 2 only."""
    results = run_pes(
        hostile_programs.rendezvous_past_hostiles,
        3,
        3,
        2,
        env={"MORI_BOOTSTRAP_TIMEOUT": "4"},
        timeout=40,
    )
    root, joined, absent = results
    assert absent == {"absent": True}
    for r in (root, joined):
        assert_error(r["error"], "BootstrapTimeoutError")
        assert "missing ranks [2]" in r["error"]["message"], r["error"]["message"]
    assert "dropped without joining" in root["error"]["message"], root["error"]["message"]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("nranks", [2, 3])
def test_peer_killed_before_barrier(nranks: int) -> None:
    results = run_pes(
        pe_programs.peer_dies,
        nranks,
        1,
        env={"MORI_BOOTSTRAP_TIMEOUT": "5"},
        timeout=60,
        return_exceptions=True,
    )
    victim = results[1]
    assert isinstance(victim, RankError) and victim.type_name == "ProcessDied" and victim.exitcode == 7, victim
    for rank, r in enumerate(results):
        if rank == 1:
            continue
        assert not isinstance(r, RankError), f"rank {rank}: {r}\n{getattr(r, 'traceback', '')}"
        assert_error(r["error"], "PeerLostError", "BootstrapTimeoutError")
        assert r["elapsed"] < 9.0, f"rank {rank} noticed the dead peer only after {r['elapsed']:.1f} s"
        assert r["finalize_elapsed"] < 9.0, f"rank {rank}: finalize took {r['finalize_elapsed']:.1f} s"


@pytest.mark.timeout(90)
def test_diverging_collectives_raise_symmetry_error() -> None:
    results = run_pes(
        pe_programs.diverging_collectives,
        2,
        env={"MORI_BOOTSTRAP_TIMEOUT": "5"},
        timeout=60,
        return_exceptions=True,
    )
    for rank, r in enumerate(results):
        assert not isinstance(r, RankError), f"rank {rank}: {r}"
        assert_error(r["error"], "SymmetryError")
        assert r["elapsed"] < 9.0


def test_run_pes_reports_failures() -> None:
    """The harness itself: a rank that dies is reported, not waited for."""
    with pytest.raises(PeFailure) as info:
        run_pes(pe_programs.peer_dies, 2, 1, env={"MORI_BOOTSTRAP_TIMEOUT": "5"}, timeout=60)
    assert 1 in info.value.failed_ranks
    assert "rank 1" in str(info.value)


# ----------------------------------------------------------------------------- torch / MPI


@pytest.mark.torch
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("nranks", "group"), [(2, "default"), (4, "default"), (2, "shmem_group")])
def test_torch_process_group_init(nranks: int, group: str) -> None:
    pytest.importorskip("torch.distributed")
    port = find_free_port()
    results = run_pes(pe_programs.torch_pg, nranks, port, group, timeout=180)
    for rank, r in enumerate(results):
        assert r["rc"] == 0
        assert r["mype"] == r["dist_rank"] == rank
        assert r["npes"] == nranks
        assert r["total"] == (1 << nranks) - 1


@pytest.mark.torch
@pytest.mark.timeout(240)
def test_torch_process_group_init_errors() -> None:
    pytest.importorskip("torch.distributed")
    port = find_free_port()
    for r in run_pes(pe_programs.torch_pg_errors, 2, port, timeout=180):
        assert_error(r["before"], "NotInitializedError", "InvalidArgumentError")
        assert_error(r["unknown"], "InvalidArgumentError")
        assert "no-such-group" in r["unknown"]["message"]
        assert r["initialized"] is False


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_mpi_init() -> None:
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec") or shutil.which("mpiexec", path=os.path.dirname(sys.executable))
    if mpiexec is None:
        pytest.skip("mpiexec not found on PATH nor next to the interpreter (install the mpich wheel)")
    env = dict(os.environ, MORI_SHMEM_HEAP_SIZE="64M", MORI_BOOTSTRAP_TIMEOUT="20")
    proc = subprocess.run(
        [mpiexec, "-n", "2", sys.executable, str(TESTS_DIR / "mpi_program.py")],
        capture_output=True,
        text=True,
        timeout=150,
        env=env,
    )
    assert proc.returncode == 0, f"rc {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    # mpiexec forwards the ranks' output in chunks, which may share a line.
    assert sorted(re.findall(r"OK (\d+)", proc.stdout)) == ["0", "1"], proc.stdout


def test_num_qp_per_pe_before_init_raises_not_initialized(shmem) -> None:
    with pytest.raises(shmem.NotInitializedError):
        shmem.shmem_num_qp_per_pe()
