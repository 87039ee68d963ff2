# SPDX-License-Identifier: MIT
"""The small-transfer path of the TCP backend: the posting thread sends a small transfer, and the
thread that waits for (or polls) it reads the response off the lane itself; the lane's receiver
thread reads it only when nobody came for it. Results are checked against numpy copies of the
bytes, and a stalled or killed target process against the usual errors and deadlines."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import peer_programs
import pytest
from conftest import new_engine, random_bytes, register, run_threads, stop_process, write_to_stopped_target

from mori.io import IOEngine, StatusCode

KiB = 1 << 10
TARGET_BYTES = 4 << 20

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def target():
    t = peer_programs.TargetProcess(peer_programs.serve_target, TARGET_BYTES, 70)
    yield t
    t.close()


def test_small_transfers_complete_whoever_reads_their_responses(pair):
    """64 writes in flight on 2 lanes at once, waited for in reverse order (each waiter reads the
    responses in front of its own), then read back and polled instead of waited for."""
    a, b = pair
    rng = np.random.default_rng(71)
    sizes = rng.integers(1, 64 * KiB, size=64)
    offsets = np.arange(64) * 64 * KiB
    src, dst, back = (
        random_bytes(64 * 64 * KiB, 72),
        np.zeros(64 * 64 * KiB, np.uint8),
        np.zeros(64 * 64 * KiB, np.uint8),
    )
    ms, md, mb = register(a, src), register(b, dst), register(a, back)
    writes = [a.write(ms, int(o), md, int(o), int(s), i) for i, (o, s) in enumerate(zip(offsets, sizes, strict=True))]
    for status in reversed(writes):
        assert status.WaitFor(20000) == StatusCode.SUCCESS, status.Message()
    expect = np.zeros_like(dst)
    for o, s in zip(offsets, sizes, strict=True):
        expect[o : o + s] = src[o : o + s]
    np.testing.assert_array_equal(dst, expect)
    reads = [
        a.read(mb, int(o), md, int(o), int(s), 100 + i) for i, (o, s) in enumerate(zip(offsets, sizes, strict=True))
    ]
    deadline = time.monotonic() + 20
    while any(r.InProgress() for r in reads):  # polling alone moves them on
        assert time.monotonic() < deadline
    assert all(r.Succeeded() for r in reads)
    np.testing.assert_array_equal(back, expect)
    assert [b.pop_inbound_transfer_status("initiator", i).Code() for i in range(64)] == [StatusCode.SUCCESS] * 64


def test_a_response_nobody_waits_for_is_read_by_the_lane_thread(pair):
    """repr reads the code without reading the socket: only the lane's receiver thread can have
    completed the transfer, within its grace of a millisecond (given 2 s on a busy machine)."""
    a, b = pair
    src, dst = random_bytes(16 * KiB, 73), np.zeros(16 * KiB, np.uint8)
    status = a.write(register(a, src), 0, register(b, dst), 0, 16 * KiB, 1)
    deadline = time.monotonic() + 2
    while repr(status) != "TransferStatus(SUCCESS)":
        assert time.monotonic() < deadline, repr(status)
        time.sleep(0.005)
    np.testing.assert_array_equal(dst, src)


@pytest.mark.parametrize("op", ["READ", "WRITE"])
@pytest.mark.parametrize("stride", [64, 16 * KiB], ids=["tiny", "in-place"])
def test_responses_sharing_one_receive_are_each_delivered(op, stride):
    """On one lane, 96 transfers in flight at once, every third to memory the target has
    deregistered: the target answers each in order, so one receive on either side takes several
    tiny frames (with refusal messages between payloads; NOTE [buffered frame reads]), or a read
    response expected in place turns out to be a refusal (NOTE [read responses in place]). Each
    transfer gets its own outcome, the bytes match numpy's copy, and the lane serves one after."""
    with new_engine("initiator", lanes=1) as a, new_engine("target", lanes=1) as b:
        a.register_remote_engine(b.get_engine_desc())
        n = 96
        src, dst = random_bytes(n * stride, 91), np.zeros(n * stride, np.uint8)
        local_src, local_dst = register(a, src), register(a, dst)
        remote_bytes = random_bytes(n * stride, 92)
        remote, gone = register(b, remote_bytes), register(b, np.zeros(stride, np.uint8))
        b.deregister_memory(gone)
        sizes = np.random.default_rng(93).integers(stride // 4, stride, size=n)
        post = a.read if op == "READ" else a.write
        local = local_dst if op == "READ" else local_src
        statuses = []
        for i, size in enumerate(sizes):
            refused = i % 3 == 2
            statuses.append(
                post(local, i * stride, gone if refused else remote, 0 if refused else i * stride, int(size), i)
            )
        for i, status in enumerate(statuses):
            code = status.WaitFor(20000)
            if i % 3 == 2:
                assert code == StatusCode.ERR_NOT_FOUND, (i, status.Message())
                assert "not registered" in status.Message()
            else:
                assert code == StatusCode.SUCCESS, (i, status.Message())
        for i, size in enumerate(sizes):
            if i % 3 == 2:
                continue
            span = slice(i * stride, i * stride + int(size))
            if op == "READ":
                np.testing.assert_array_equal(dst[span], remote_bytes[span])
            else:
                np.testing.assert_array_equal(remote_bytes[span], src[span])
        after = a.read(local_dst, 0, remote, 0, n * stride, n)
        assert after.WaitFor(20000) == StatusCode.SUCCESS, after.Message()
        np.testing.assert_array_equal(dst, remote_bytes)


def test_many_threads_on_fewer_lanes_keep_every_byte():
    """8 threads on 2 lanes: lanes are shared, so waiters find others' responses in front of theirs
    or another waiter already reading; each thread checks its own writes read back."""
    with new_engine("initiator", lanes=2) as a, new_engine("target", lanes=2) as b:
        a.register_remote_engine(b.get_engine_desc())
        n = 8 * KiB
        src, dst, back = random_bytes(8 * 32 * n, 74), np.zeros(8 * 32 * n, np.uint8), np.zeros(8 * 32 * n, np.uint8)
        ms, md, mb = register(a, src), register(b, dst), register(a, back)
        errors: list[str] = []

        def worker(t: int) -> None:
            for k in range(32):
                off = (t * 32 + k) * n
                w = a.write(ms, off, md, off, n, t * 1000 + k)
                if w.WaitFor(20000) != StatusCode.SUCCESS:
                    errors.append(w.Message())
                    return
                r = a.read(mb, off, md, off, n, t * 1000 + 500 + k)
                ok = r.WaitFor(20000) if k % 2 else IOEngine.wait_all([r], 20000)
                if ok != StatusCode.SUCCESS or not np.array_equal(back[off : off + n], src[off : off + n]):
                    errors.append(f"thread {t} item {k}: {r.Message()}")
                    return

        run_threads(worker, 8, 50)
        assert not errors, errors[:3]
        np.testing.assert_array_equal(dst, src)


def test_a_waiter_that_times_out_leaves_the_response_to_the_lane(target):
    """WaitFor's timeout holds while the peer is stopped; once it answers, the transfer completes
    without anyone waiting (the lane's thread took over from the waiter that gave up)."""
    with new_engine("initiator") as a:
        a.register_remote_engine(target.desc)
        src = random_bytes(4 * KiB, 75)
        local = register(a, src)
        assert a.write(local, 0, target.mem, 0, 16, 1).WaitFor(20000) == StatusCode.SUCCESS  # connected
        stop_process(target.proc.pid)
        try:
            status = a.write(local, 0, target.mem, 4 * KiB, 4 * KiB, 2)
            start = time.monotonic()
            assert status.WaitFor(100) == StatusCode.IN_PROGRESS
            assert 0.09 < time.monotonic() - start < 2
            assert status.WaitFor(0) == StatusCode.IN_PROGRESS and status.InProgress()
        finally:
            os.kill(target.proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 5
        while repr(status) != "TransferStatus(SUCCESS)":
            assert time.monotonic() < deadline, repr(status)
            time.sleep(0.005)
        assert target.ask("bytes", 4 * KiB, 4 * KiB) == src.tobytes()


def test_a_peer_killed_while_its_waiter_reads_fails_the_transfer(target):
    with new_engine("initiator") as a:
        a.register_remote_engine(target.desc)
        local = register(a, random_bytes(4 * KiB, 76))
        assert a.write(local, 0, target.mem, 0, 16, 1).WaitFor(20000) == StatusCode.SUCCESS
        stop_process(target.proc.pid)
        status = a.read(local, 0, target.mem, 0, 4 * KiB, 2)
        threading.Timer(0.2, os.kill, (target.proc.pid, signal.SIGKILL)).start()
        start = time.monotonic()
        assert status.WaitFor(8000) == StatusCode.ERR_BAD_STATE
        assert time.monotonic() - start < 8
        assert "lost" in status.Message() and "target" in status.Message()


def test_a_stalled_peer_fails_a_waited_small_transfer_after_op_timeout(target):
    with new_engine("initiator", op_timeout_ms=500) as a:
        a.register_remote_engine(target.desc)
        local = register(a, random_bytes(4 * KiB, 77))
        assert a.write(local, 0, target.mem, 0, 16, 1).WaitFor(20000) == StatusCode.SUCCESS
        write_to_stopped_target(a, target, local, 4 * KiB, 2, StatusCode.ERR_BAD_STATE, op_timeout_ms=500)


def connections_to(port: int) -> list[int]:
    """This process's file descriptors of TCP connections to 127.0.0.1:``port``, oldest first
    (from /proc/net/tcp and /proc/self/fd)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].split(":")[1], 16)
            if remote_port == port and fields[3] == "01":  # ESTABLISHED
                inodes.add(fields[9])
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            fds.append(int(fd))
    return sorted(fds)


@pytest.mark.parametrize("op", ["write", "read"])
def test_one_connection_failing_mid_split_fails_the_transfer(target, op):
    """A 2 MiB transfer split over 4 lanes, its target stopped so that no frame can be answered;
    one lane's connection is shut down under it: the transfer fails with ERR_BAD_STATE at once
    (not after op_timeout_ms), never SUCCESS, and the next transfer reconnects and is exact."""
    import socket

    with new_engine("initiator", lanes=4) as a:
        a.register_remote_engine(target.desc)
        src, back = random_bytes(2 << 20, 78), np.zeros(2 << 20, np.uint8)
        ms, mb = register(a, src), register(a, back)
        assert a.write(ms, 0, target.mem, 0, 16, 1).WaitFor(20000) == StatusCode.SUCCESS  # connected
        conns = connections_to(target.desc.port)
        assert len(conns) == 5  # the control connection and 4 lanes
        stop_process(target.proc.pid)
        try:
            post = a.write if op == "write" else a.read
            status = post(ms if op == "write" else mb, 0, target.mem, 0, 2 << 20, 2)
            time.sleep(0.1)
            assert status.InProgress()
            lane = socket.socket(fileno=os.dup(conns[-1]))
            start = time.monotonic()
            lane.shutdown(socket.SHUT_RDWR)
            lane.close()
            assert status.WaitFor(5000) == StatusCode.ERR_BAD_STATE
            assert time.monotonic() - start < 5
            assert "lost" in status.Message()
        finally:
            os.kill(target.proc.pid, signal.SIGCONT)
        again = a.write(ms, 0, target.mem, 0, 2 << 20, 3)
        assert again.WaitFor(20000) == StatusCode.SUCCESS, again.Message()
        assert a.read(mb, 0, target.mem, 0, 2 << 20, 4).WaitFor(20000) == StatusCode.SUCCESS
        np.testing.assert_array_equal(back, src)
