# SPDX-License-Identifier: MIT
"""What a peer without the secret, or a hostile target, can make an engine hold or do.

- Unauthenticated connections count against their own small limit (MORI_IO_MAX_PENDING_CONNECTIONS)
  and deadline (MORI_IO_HANDSHAKE_TIMEOUT_MS), never against the authenticated slots.
- A target's announced frame limits are clamped, so a tiny max_frame_bytes cannot multiply the
  initiator's frames (and memory) per byte.
- Posting never waits for a connection: a peer that accepts and never answers costs the caller
  nothing, and the transfer's status fails after the connect timeout.
- Wrong Python types and out-of-range values at the public entry points raise mori.io's errors.
"""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest
import raw_peer
from conftest import new_engine, random_bytes, register, run_threads

import mori.io as mio
from mori.io import EngineDesc, MemoryDesc, MemoryLocationType, StatusCode

pytestmark = pytest.mark.timeout(60)


def _desc(key: str, port: int, secret: bytes) -> EngineDesc:
    return EngineDesc(key, "", "fake-host", "127.0.0.1", port, 0, secret)


def _remote_mem(key: str, size: int) -> MemoryDesc:
    return MemoryDesc(key, 0, -1, "", -1, 0, size, MemoryLocationType.CPU)


def test_idle_sockets_never_take_authenticated_slots(monkeypatch):
    """More idle sockets than both limits together; a real peer still connects and reads, and the
    idle sockets beyond the pending limit are closed by the target at once."""
    monkeypatch.setenv("MORI_IO_MAX_PENDING_CONNECTIONS", "4")
    monkeypatch.setenv("MORI_IO_MAX_CONNECTIONS", "3")  # exactly the peer's control + 2 lanes
    monkeypatch.setenv("MORI_IO_HANDSHAKE_TIMEOUT_MS", "30000")  # only the pending limit can help
    target = new_engine("target", lanes=2)
    idle: list[socket.socket] = []
    peer = None
    try:
        data = random_bytes(64 * 1024, 5)
        mem = register(target, data)
        port = target.get_engine_desc().port
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(12)]
        time.sleep(0.2)
        peer = new_engine("peer", lanes=2)
        peer.register_remote_engine(target.get_engine_desc())
        out = np.zeros_like(data)
        start = time.monotonic()
        status = peer.read(register(peer, out), 0, mem, 0, data.nbytes, 1)
        assert status.WaitFor(10000) == StatusCode.SUCCESS, status.Message()
        assert time.monotonic() - start < 5
        assert np.array_equal(out, data)
        # The newest connections pushed the older idle ones out: at most 4 may still be open.
        closed = sum(raw_peer.closed(s, timeout=0.5) for s in idle)
        assert closed >= len(idle) - 4
    finally:
        for s in idle:
            s.close()
        if peer is not None:
            peer.shutdown()
        target.shutdown()


def test_failed_handshakes_free_their_threads_at_once(guarded_target):
    """Thirty connections that fail their handshake leave no thread behind within a second."""
    target = guarded_target
    baseline = len(os.listdir("/proc/self/task"))
    port = target.get_engine_desc().port
    for _ in range(30):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"not a mori.io hello, but long enough to be read as one: " + b"x" * 64)
            assert raw_peer.closed(sock, timeout=5)
    deadline = time.monotonic() + 2
    while len(os.listdir("/proc/self/task")) > baseline and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(os.listdir("/proc/self/task")) <= baseline


def test_silent_connection_is_closed_after_the_handshake_deadline_not_the_cp_timeout(monkeypatch):
    monkeypatch.setenv("MORI_IO_HANDSHAKE_TIMEOUT_MS", "200")
    monkeypatch.setenv("MORI_IO_CP_TIMEOUT_MS", "20000")
    target = new_engine("target")
    try:
        start = time.monotonic()
        with socket.create_connection(("127.0.0.1", target.get_engine_desc().port), timeout=5) as sock:
            assert raw_peer.closed(sock, timeout=5)
        assert time.monotonic() - start < 2
    finally:
        target.shutdown()


@pytest.fixture
def guarded_target():
    target = new_engine("target")
    yield target
    target.shutdown()


def test_a_tiny_announced_frame_size_is_clamped():
    """A fake target announcing max_frame_bytes=1 and max_segments=1 gets 64 KiB frames."""
    secret = os.urandom(32)
    size = 1 << 20
    fake = raw_peer.FakeTarget(secret, size, max_frame_bytes=1, max_segments=1)
    engine = new_engine("initiator", lanes=4)
    try:
        engine.register_remote_engine(_desc("fake", fake.port, secret))
        src = random_bytes(size, 9)
        status = engine.write(register(engine, src), 0, _remote_mem("fake", size), 0, size, 1)
        assert status.WaitFor(10000) == StatusCode.SUCCESS, status.Message()
        assert bytes(fake.region) == src.tobytes()
        assert len(fake.frames) == size // (64 * 1024)  # 16 frames, not a million
        assert all(payload == 64 * 1024 for payload, _ in fake.frames)
        # 64 segments a frame at least: a 256-piece batch takes 4 frames, not 256.
        pieces = np.arange(256, dtype=np.int64) * 4096
        fake.frames.clear()
        status = engine.batch_write([register(engine, src)], [pieces], [_remote_mem("fake", size)], [pieces],
                                    [np.full(256, 16, np.int64)], [2])[0]  # fmt: skip
        assert status.WaitFor(10000) == StatusCode.SUCCESS, status.Message()
        assert sorted(n for _, n in fake.frames) == [64] * 4
    finally:
        engine.shutdown()
        fake.stop()


def test_posting_never_waits_for_a_peer_that_accepts_and_never_answers(monkeypatch):
    monkeypatch.setenv("MORI_IO_CP_TIMEOUT_MS", "1000")
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel completes connections; nobody answers
    engine = new_engine("initiator")
    healthy = new_engine("healthy")
    try:
        engine.register_remote_engine(_desc("silent", silent.getsockname()[1], os.urandom(32)))
        engine.register_remote_engine(healthy.get_engine_desc())
        buf = random_bytes(4096, 3)
        local = register(engine, buf)
        remote = _remote_mem("silent", 4096)
        statuses: list = []
        posting: list[float] = []

        def post(uid: int) -> None:
            start = time.monotonic()
            statuses.append(engine.write(local, 0, remote, 0, 4096, uid))
            posting.append(time.monotonic() - start)

        run_threads(post, 4, None)
        assert max(posting) < 0.5, posting
        # A healthy peer is served while the silent one's connection is still pending.
        dst = np.zeros(4096, np.uint8)
        ok = engine.write(local, 0, register(healthy, dst), 0, 4096, 10)
        assert ok.WaitFor(5000) == StatusCode.SUCCESS and np.array_equal(dst, buf)
        for status in statuses:
            assert status.WaitFor(5000) == StatusCode.ERR_BAD_STATE
            assert "silent" in status.Message()
    finally:
        engine.shutdown()
        healthy.shutdown()
        silent.close()


def test_wrong_types_and_ranges_raise_mori_io_errors(pair):
    a, b = pair
    ma = register(a, np.zeros(16, np.uint8))
    mb = register(b, np.zeros(16, np.uint8))
    cases = [
        lambda: EngineDesc("k", "", "h", "127.0.0.1", 70000, 1).pack(),
        lambda: EngineDesc("k", "", "h", "127.0.0.1", "80", 1),
        lambda: EngineDesc(7, "", "h", "127.0.0.1", 80, 1),
        lambda: MemoryDesc("k", -1, -1, "", -1, 0, 16, MemoryLocationType.CPU).pack(),
        lambda: MemoryDesc("k", 0, -1, "", -1, 0, 2**64, MemoryLocationType.CPU),
        lambda: MemoryDesc("k", 0, -1, "", -1, 0, 16, 1),
        lambda: MemoryDesc("k", 0, -1, "", -1, 0, 16, MemoryLocationType.CPU, b"x" * 65),
        lambda: mio.IOEngine("x", mio.IOEngineConfig(port=70000)),
        lambda: mio.IOEngine("x", mio.IOEngineConfig(host=5)),  # type: ignore[arg-type]
        lambda: a.create_backend("TCP"),  # type: ignore[arg-type]
        lambda: a.remove_backend([1]),  # type: ignore[arg-type]
        lambda: a.register_memory("0", 16, -1, MemoryLocationType.CPU),
        lambda: a.register_memory(0, 16, 2**40, MemoryLocationType.CPU),
        lambda: a.write(ma, 0, mb, 0, 1, 2**64),
        lambda: a.write(ma, 0.5, mb, 0, 1, 0),
        lambda: a.read(ma, 0, mb, 0, 2**64, 0),
        lambda: a.batch_read(ma, [[0]], [mb], [[0]], [[1]], [0]),
        lambda: a.batch_read([ma], [[0]], [mb], [[0]], 5, [0]),
        lambda: a.pop_inbound_transfer_status(5, 0),
        lambda: a.pop_inbound_transfer_status("initiator", -1),
        lambda: a.wait_all([1]),
        lambda: a.wait_all([], timeout_ms="1"),
        lambda: a.wait_all(5),
        lambda: a.create_session(ma, mb).write(0, 0, 1, "x"),
        lambda: a.create_session(ma, mb).batch_write([0], [0], [-1], 0),
        lambda: a.deregister_memory(5),
        lambda: a.register_remote_engine(b"bytes"),
        lambda: mio.set_log_level(10),  # type: ignore[arg-type]
        lambda: mio.IOEngine("x", None),  # type: ignore[arg-type]
        lambda: mio.IOEngine("x", mio.IOEngineConfig(secret="not bytes")),  # type: ignore[arg-type]
        lambda: a.create_backend(mio.BackendType.TCP, mio.TcpBackendConfig(num_data_conns="8")),  # type: ignore[arg-type]
        lambda: a.create_backend(mio.BackendType.RDMA, mio.RdmaBackendConfig(poll_cq_mode=0)),  # type: ignore[arg-type]
        lambda: a.create_session(1, mb),  # type: ignore[arg-type]
        lambda: EngineDesc.unpack(5),  # type: ignore[arg-type]
    ]
    for case in cases:
        with pytest.raises(mio.MoriIoError):
            case()


def test_refusals_name_the_peer(guarded_target, capfd):
    """The target's warning names the address and the key a peer claimed when it fails."""
    target = guarded_target
    with pytest.raises(PermissionError):
        raw_peer.connect(target.get_engine_desc().port, os.urandom(32), key="mallory", check_server=False)
    deadline = time.monotonic() + 5
    text = ""
    while time.monotonic() < deadline and "mallory" not in text:
        time.sleep(0.05)
        captured = capfd.readouterr()
        text += captured.out + captured.err
    assert "refused a connection from 127.0.0.1:" in text and "peer 'mallory'" in text, text
