# SPDX-License-Identifier: MIT
"""The RDMA backend (UCX) between an initiator here and a target engine in a second process:
transfers checked against the target's own bytes, inbound status, and a peer that dies or stalls
mid-transfer gives a Failed status (ERR_RDMA_OP) in time, never a hang."""

from __future__ import annotations

import hashlib
import os
import signal
import time

import pytest
import rdma_programs
from conftest import (
    kill_target_mid_batch,
    random_bytes,
    register,
    write_then_scattered_read,
    write_to_stopped_target,
)
from peer_programs import TARGET_BYTES, MiB, TargetProcess
from rdma_programs import rdma_engine, ucx_unavailable

from mori.io import StatusCode

pytestmark = pytest.mark.timeout(60)

_WHY = ucx_unavailable()
if _WHY:
    pytest.skip(f"UCX cannot be loaded here: {_WHY}", allow_module_level=True)


class Target(TargetProcess):
    """A spawned process running rdma_programs.serve_rdma_target."""

    def __init__(self, tls: str | None, with_tcp: bool = False, seed: int = 50) -> None:
        self.seed = seed
        super().__init__(rdma_programs.serve_rdma_target, TARGET_BYTES, seed, tls, with_tcp)


@pytest.fixture
def target(ucx_tls):
    t = Target(ucx_tls)
    yield t
    t.close()


def test_two_processes_write_read_batch_and_inbound_status(target):
    with rdma_engine("initiator", qp_per_transfer=2) as a:
        src = random_bytes(8 * MiB, 51)
        local, session, uid = write_then_scattered_read(a, target, src, stride=3)
        assert target.ask("pop", "initiator", uid) == StatusCode.SUCCESS  # RDMA records reads too
        # And a batch write of many small descriptors.
        sizes = [1000 + i for i in range(500)]
        local_offsets = [i * 4096 for i in range(500)]
        remote_offsets = [TARGET_BYTES - (i + 1) * 4096 for i in range(500)]
        writer = a.create_session(local, target.mem)
        status = writer.batch_write(local_offsets, remote_offsets, sizes, a.allocate_transfer_uid())
        assert status.WaitFor(30000) == StatusCode.SUCCESS, status.Message()
        for lo, ro, n in list(zip(local_offsets, remote_offsets, sizes, strict=True))[::50]:
            assert target.ask("bytes", ro, n) == src[lo : lo + n].tobytes()
        assert session.alive()
        assert target.ask("exit")


def test_peer_killed_mid_transfer_fails_within_the_timeout(target):
    with rdma_engine("initiator", op_timeout_ms=4000) as a:
        _, session, status, start = kill_target_mid_batch(a, target, 52)
        assert status.WaitFor(10000) == StatusCode.ERR_RDMA_OP, status.Message()
        assert time.monotonic() - start < 6
        assert "engine 'target'" in status.Message()
        assert not session.alive()
        # New transfers to the dead peer fail fast instead of hanging.
        start = time.monotonic()
        again = session.write(0, 0, 16, 2)
        assert again.WaitFor(10000) == StatusCode.ERR_RDMA_OP
        assert time.monotonic() - start < 6


def test_stalled_peer_fails_after_op_timeout_then_recovers(target):
    with rdma_engine("initiator", op_timeout_ms=1000) as a:
        a.register_remote_engine(target.desc)
        src = random_bytes(8 * MiB, 53)
        local = register(a, src)
        a.create_session(local, target.mem)
        try:
            write_to_stopped_target(a, target, local, 8 * MiB, 5, StatusCode.ERR_RDMA_OP, op_timeout_ms=1000)
        finally:
            os.kill(target.proc.pid, signal.SIGCONT)
        # The peer answers again: the next transfer connects anew and lands.
        status = a.write(local, 0, target.mem, 0, 8 * MiB, 6)
        assert status.WaitFor(20000) == StatusCode.SUCCESS, status.Message()
        assert target.ask("digest", 0, 8 * MiB) == hashlib.sha256(src.tobytes()).hexdigest()
