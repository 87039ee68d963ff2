# SPDX-License-Identifier: MIT
"""An initiator here and a target engine in a real second process (multiprocessing spawn):
transfers checked by digest, and a peer that dies or stalls mid-batch gives Failed in time."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import peer_programs
import pytest
from conftest import (
    kill_target_mid_batch,
    new_engine,
    random_bytes,
    register,
    run_threads,
    write_then_scattered_read,
    write_to_stopped_target,
)
from peer_programs import TARGET_BYTES, MiB

from mori.io import IOEngine, StatusCode

pytestmark = pytest.mark.timeout(60)


class Target(peer_programs.TargetProcess):
    """A spawned process running peer_programs.serve_target."""

    def __init__(self, seed: int = 40) -> None:
        self.seed = seed
        super().__init__(peer_programs.serve_target, TARGET_BYTES, seed)


@pytest.fixture
def target():
    t = Target()
    yield t
    t.close()


def test_two_processes_write_read_and_inbound_status(target):
    with new_engine("initiator") as a:
        _, session, _ = write_then_scattered_read(a, target, random_bytes(8 * MiB, 41), stride=1)
        assert session.alive()
        assert target.ask("exit")


def test_peer_killed_mid_batch_fails_within_timeout(target):
    with new_engine("initiator") as a:
        local, session, status, start = kill_target_mid_batch(a, target, 42)
        assert status.WaitFor(8000) == StatusCode.ERR_BAD_STATE
        assert time.monotonic() - start < 8
        assert "lost" in status.Message() and "target" in status.Message()
        assert not session.alive()
        # New transfers to the dead peer fail fast instead of hanging.
        again = a.write(local, 0, target.mem, 0, 16, 2)
        assert again.WaitFor(8000) == StatusCode.ERR_BAD_STATE and "cannot connect" in again.Message()


def test_stalled_peer_fails_after_op_timeout(target):
    with new_engine("initiator", op_timeout_ms=1000) as a:
        a.register_remote_engine(target.desc)
        local = register(a, random_bytes(8 * MiB, 43))
        a.create_session(local, target.mem)
        status = write_to_stopped_target(a, target, local, 8 * MiB, 5, StatusCode.ERR_BAD_STATE, op_timeout_ms=1000)
        assert IOEngine.wait_all([status], 0) == StatusCode.ERR_BAD_STATE


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_threads_mixing_random_batch_reads_and_writes(target):
    """4 threads, each owning a quarter of the target's memory, mix random batches of 4-64 KiB
    writes and reads; a numpy model of the target's bytes checks every read and the end state."""
    model = np.random.default_rng(target.seed).integers(0, 256, size=TARGET_BYTES, dtype=np.uint8)
    quarter = TARGET_BYTES // 4
    errors: list[str] = []
    with new_engine("initiator") as a:
        a.register_remote_engine(target.desc)

        def worker(index: int) -> None:
            rng = np.random.default_rng(100 + index)
            src = rng.integers(0, 256, size=4 * MiB, dtype=np.uint8)
            dst = np.zeros(4 * MiB, np.uint8)
            session_w = a.create_session(register(a, src), target.mem)
            session_r = a.create_session(register(a, dst), target.mem)
            base = index * quarter
            for step in range(1000):
                count = int(rng.integers(1, 64))
                sizes = rng.integers(4096, 64 * 1024, size=count)
                slots = rng.choice(quarter // (64 * 1024), size=count, replace=False)
                remote = base + slots * 64 * 1024
                local = rng.integers(0, 4 * MiB - 64 * 1024, size=count)
                if step % 2 == 0:
                    status = session_w.batch_write(local.tolist(), remote.tolist(), sizes.tolist(), step)
                    if status.WaitFor(30000) != StatusCode.SUCCESS:
                        errors.append(status.Message())
                        return
                    for lo, ro, s in zip(local, remote, sizes, strict=True):
                        model[ro : ro + s] = src[lo : lo + s]
                else:
                    dst_off = np.arange(count) * 64 * 1024
                    status = session_r.batch_read(dst_off.tolist(), remote.tolist(), sizes.tolist(), step)
                    if status.WaitFor(30000) != StatusCode.SUCCESS:
                        errors.append(status.Message())
                        return
                    for lo, ro, s in zip(dst_off, remote, sizes, strict=True):
                        if not np.array_equal(dst[lo : lo + s], model[ro : ro + s]):
                            errors.append(f"thread {index} step {step}: read mismatch at remote offset {ro}")
                            return

        run_threads(worker, 4, 240)
    assert not errors, errors[:3]
    assert target.ask("digest", 0, TARGET_BYTES) == hashlib.sha256(model.tobytes()).hexdigest()
