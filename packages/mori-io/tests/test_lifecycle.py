# SPDX-License-Identifier: MIT
"""Deregistration racing transfers, engine shutdown with transfers in flight, re-registration."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import new_engine, random_bytes, register, run_threads

from mori.io import NotFoundError, StatusCode

MiB = 1 << 20


def test_write_racing_a_target_deregister_never_lands_after_it(pair):
    a, b = pair
    n = 16 * MiB
    src = random_bytes(n, 50)
    for round_ in range(6):
        dst = np.zeros(n, np.uint8)
        ma, mb = register(a, src), register(b, dst)
        statuses = [a.write(ma, i * MiB, mb, i * MiB, MiB, round_ * 100 + i) for i in range(16)]
        b.deregister_memory(mb)  # races the frames on the wire
        snapshot = dst.copy()
        codes = [s.WaitFor(20000) for s in statuses]
        assert all(c in (StatusCode.SUCCESS, StatusCode.ERR_NOT_FOUND) for c in codes), codes
        # Nothing was written once deregister_memory returned...
        assert np.array_equal(dst, snapshot)
        # ...and every transfer that reported success really landed.
        for i, code in enumerate(codes):
            if code == StatusCode.SUCCESS:
                assert np.array_equal(dst[i * MiB : (i + 1) * MiB], src[i * MiB : (i + 1) * MiB])
            else:
                assert "not registered" in statuses[i].Message()
        a.deregister_memory(ma)


def test_local_deregister_waits_for_transfers_using_the_memory(pair):
    a, b = pair
    n = 32 * MiB
    src, dst = random_bytes(n, 51), np.zeros(n, np.uint8)
    ma, mb = register(a, src), register(b, dst)
    status = a.write(ma, 0, mb, 0, n, 1)
    a.deregister_memory(ma)  # returns only once no IO thread reads src any more
    assert status.Code() in (StatusCode.SUCCESS,)  # the transfer had to finish first
    assert np.array_equal(dst, src)


def test_shutdown_with_transfers_in_flight_fails_them():
    a, b = new_engine("a"), new_engine("b")
    a.register_remote_engine(b.get_engine_desc())
    n = 32 * MiB
    ma, mb = register(a, random_bytes(n, 52)), register(b, np.zeros(n, np.uint8))
    statuses = [a.write(ma, 0, mb, 0, n, i) for i in range(4)]
    b.shutdown()
    codes = [s.WaitFor(20000) for s in statuses]
    assert all(c in (StatusCode.SUCCESS, StatusCode.ERR_BAD_STATE) for c in codes)
    a.shutdown()
    a.shutdown()  # idempotent


def test_deregistered_remote_engine_and_reconnect_after_restart():
    a = new_engine("a")
    b = new_engine("b")
    try:
        a.register_remote_engine(b.get_engine_desc())
        ma = register(a, random_bytes(4096, 53))
        mb = register(b, np.zeros(4096, np.uint8))
        assert a.write(ma, 0, mb, 0, 4096, 1).WaitFor(10000) == StatusCode.SUCCESS
        a.deregister_remote_engine(b.get_engine_desc())
        try:
            a.write(ma, 0, mb, 0, 4096, 2)
            raise AssertionError("expected NotFoundError")
        except NotFoundError:
            pass
        # b restarts (new port, new secret); re-registering it makes a fresh link.
        b.shutdown()
        b = new_engine("b")
        dst = np.zeros(4096, np.uint8)
        mb = register(b, dst)
        a.register_remote_engine(b.get_engine_desc())
        assert a.write(ma, 0, mb, 0, 4096, 3).WaitFor(10000) == StatusCode.SUCCESS
        assert dst.any()
    finally:
        a.shutdown()
        b.shutdown()


def test_many_threads_share_one_engine(pair):
    a, b = pair
    n = 64 * 1024
    src, dst = random_bytes(8 * n, 54), np.zeros(8 * n, np.uint8)
    ma, mb = register(a, src), register(b, dst)
    errors: list[str] = []

    def worker(i: int) -> None:
        for k in range(20):
            s = a.write(ma, i * n, mb, i * n, n, i * 1000 + k)
            if s.WaitFor(20000) != StatusCode.SUCCESS:
                errors.append(s.Message())

    run_threads(worker, 8, 60)
    assert not errors and np.array_equal(src, dst)


def test_a_shut_down_engine_refuses_new_work():
    from mori.io import EngineClosedError

    a, b = new_engine("closing-a"), new_engine("closing-b")
    try:
        a.register_remote_engine(b.get_engine_desc())
        ma, mb = register(a, np.zeros(64, np.uint8)), register(b, np.zeros(64, np.uint8))
        a.shutdown()
        with pytest.raises(EngineClosedError, match="'closing-a' is shut down"):
            a.write(ma, 0, mb, 0, 64, 1)
        with pytest.raises(EngineClosedError):
            register(a, np.zeros(8, np.uint8))
    finally:
        b.shutdown()


def test_deregister_is_not_held_hostage_by_a_stalled_writer():
    """A peer that starts a frame into the region and stops sending cannot block deregistration:
    past op_timeout_ms the engine aborts that connection and the call returns."""
    import time

    import raw_peer

    target = new_engine("target", op_timeout_ms=500)
    try:
        region = np.zeros(1 << 20, np.uint8)
        mem = register(target, region)
        sock = raw_peer.connect(target.get_engine_desc().port, target.get_engine_desc().secret)
        sock.sendall(raw_peer.frame(raw_peer.WRITE, 1, mem.id, [(0, 1 << 20)]) + b"\x11" * 1000)
        time.sleep(0.2)  # the target is now receiving into the region
        start = time.monotonic()
        target.deregister_memory(mem)
        assert time.monotonic() - start < 5
        assert raw_peer.closed(sock)
        sock.close()
    finally:
        target.shutdown()


def test_remove_backend_fails_transfers_and_needs_a_new_backend(pair):
    from mori.io import BackendType

    a, b = pair
    n = 32 * MiB
    ma, mb = register(a, random_bytes(n, 55)), register(b, np.zeros(n, np.uint8))
    status = a.write(ma, 0, mb, 0, n, 1)
    a.remove_backend(BackendType.TCP)
    assert status.WaitFor(20000) in (StatusCode.SUCCESS, StatusCode.ERR_BAD_STATE)
    after = a.write(ma, 0, mb, 0, 16, 2)
    assert after.Failed() and "create backend first" in after.Message()
    a.create_backend(BackendType.TCP)
    assert a.write(ma, 0, mb, 0, 16, 3).WaitFor(20000) == StatusCode.SUCCESS
