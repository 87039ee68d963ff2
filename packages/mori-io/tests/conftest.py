# SPDX-License-Identifier: MIT
"""Shared fixtures of the mori-io suite: engines on loopback with short deadlines, CPU buffers
(markers, timeouts and the hypothesis profile come from mori.testing.pytest_plugin).

Second engines that must live in another process run functions from peer_programs.py (module
level so multiprocessing's spawn can import them) under mori.testing.PeerProcess.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # spawned children inherit sys.path

# A broken test must fail in seconds, not after the 30 s default deadlines. Children inherit these.
os.environ.setdefault("MORI_IO_CP_TIMEOUT_MS", "3000")
os.environ.setdefault("MORI_IO_TCP_OP_TIMEOUT_MS", "10000")


def pytest_mori_default_timeout(config: pytest.Config) -> float:
    return 60


def new_engine(key: str, lanes: int = 4, **tcp: int):
    from mori.io import BackendType, IOEngine, IOEngineConfig, TcpBackendConfig

    engine = IOEngine(key, IOEngineConfig())
    engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=lanes, **tcp))
    return engine


@pytest.fixture(params=[None, "tcp"], ids=["ucx-default", "ucx-tcp"])
def ucx_tls(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str | None:
    """UCX_TLS as the engines' UCX contexts read it when their RDMA backend is created: UCX's own
    transport choice, or tcp only."""
    if request.param is None:
        monkeypatch.delenv("UCX_TLS", raising=False)
    else:
        monkeypatch.setenv("UCX_TLS", request.param)
    return request.param


@pytest.fixture
def pair() -> Iterator[tuple]:
    """Two engines in this process, each registered with the other."""
    a, b = new_engine("initiator"), new_engine("target")
    a.register_remote_engine(b.get_engine_desc())
    b.register_remote_engine(a.get_engine_desc())
    yield a, b
    a.shutdown()
    b.shutdown()


#: Arrays registered by the running test: registered memory must outlive the engine's use of it,
#: and a temporary numpy array would otherwise be freed while an IO thread still reads it.
_REGISTERED: list[np.ndarray] = []


@pytest.fixture(autouse=True)
def _keep_registered_arrays_alive() -> Iterator[None]:
    yield
    _REGISTERED.clear()


def register(engine, array: np.ndarray):
    from mori.io import MemoryLocationType

    _REGISTERED.append(array)
    return engine.register_memory(array.ctypes.data, array.nbytes, -1, MemoryLocationType.CPU)


def random_bytes(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def run_threads(worker: Callable[[int], None], count: int, join_timeout: float | None) -> None:
    """Runs worker(0), ..., worker(count - 1) on as many threads at once and joins each for at most
    join_timeout seconds; the caller then checks what the workers recorded."""
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(join_timeout)


def multi_pair_batch_round_trip(a, b, seed: int) -> None:
    """One batch_write of three pairs (each pair's halves swapped on b; b records each pair's uid as
    a succeeded inbound transfer), then one batch_read of the three regions back, both checked
    against numpy. a is registered with b under the key "initiator"."""
    from mori.io import IOEngine, StatusCode

    srcs = [random_bytes(8192, seed + i) for i in range(3)]
    dsts = [np.zeros(8192, np.uint8) for _ in range(3)]
    locals_ = [register(a, s) for s in srcs]
    remotes = [register(b, d) for d in dsts]
    uids = [a.allocate_transfer_uid() for _ in range(3)]
    statuses = a.batch_write(locals_, [[0, 4096]] * 3, remotes, [[4096, 0]] * 3, [[4096, 4096]] * 3, uids)
    assert len(statuses) == 3
    assert IOEngine.wait_all(statuses, 20000) == StatusCode.SUCCESS, [s.Message() for s in statuses]
    for s, d in zip(srcs, dsts, strict=True):
        assert np.array_equal(d[4096:], s[:4096]) and np.array_equal(d[:4096], s[4096:])
    for uid in uids:
        assert b.pop_inbound_transfer_status("initiator", uid).Succeeded()
    back = [np.zeros(8192, np.uint8) for _ in range(3)]
    statuses = a.batch_read([register(a, x) for x in back], [[0]] * 3, remotes, [[0]] * 3, [[8192]] * 3, uids)
    assert IOEngine.wait_all(statuses, 20000) == StatusCode.SUCCESS
    for x, d in zip(back, dsts, strict=True):
        assert np.array_equal(x, d)


def write_then_scattered_read(initiator, target, src: np.ndarray, stride: int) -> tuple:
    """With ``target`` a peer_programs.TargetProcess: registers ``initiator`` (key "initiator")
    there and the target here, writes ``src`` at 3 MiB of the target's memory (checked by digest and
    by the target's inbound status), then reads 16 pieces of 64 KiB scattered ``stride`` pieces
    apart from the end of the target's memory in one batch, each compared with the target's own
    bytes. Returns the registered ``src``, the reading session and the read's transfer uid."""
    from mori.io import StatusCode

    piece, at = 64 * 1024, 3 << 20
    initiator.register_remote_engine(target.desc)
    assert target.ask("register", initiator.get_engine_desc().pack())
    local = register(initiator, src)
    uid = initiator.allocate_transfer_uid()
    status = initiator.write(local, 0, target.mem, at, src.nbytes, uid)
    assert status.WaitFor(30000) == StatusCode.SUCCESS, status.Message()
    assert target.ask("digest", at, src.nbytes) == hashlib.sha256(src.tobytes()).hexdigest()
    assert target.ask("pop", "initiator", uid) == StatusCode.SUCCESS
    back = np.zeros(16 * piece, np.uint8)
    session = initiator.create_session(register(initiator, back), target.mem)
    offsets = list(range(0, back.nbytes, piece))
    remote = [target.mem.size - piece - stride * o for o in offsets]
    uid = initiator.allocate_transfer_uid()
    status = session.batch_read(offsets, remote, [piece] * len(offsets), uid)
    assert status.WaitFor(30000) == StatusCode.SUCCESS, status.Message()
    for lo, ro in zip(offsets, remote, strict=True):
        assert back[lo : lo + piece].tobytes() == target.ask("bytes", ro, piece)
    return local, session, uid


def stop_process(pid: int) -> None:
    """SIGSTOP, returning once every thread of the process is stopped (kill returns before:
    a thread still running could finish the very transfer a test means to stall)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while True:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:  # a thread that just exited
                continue
        if all(state in "tT" for state in states):
            return
        assert time.monotonic() < deadline, f"process {pid} did not stop: {states}"
        time.sleep(0.001)


def write_to_stopped_target(initiator, target, local, nbytes: int, uid: int, code, op_timeout_ms: int):
    """With ``target`` a peer_programs.TargetProcess: stops it (stop_process), writes ``nbytes``
    of ``local`` to the start of its memory, and checks that the write fails with ``code`` once the
    initiator's ``op_timeout_ms`` has passed (not before, and within 5 s), naming that setting.
    Returns the failed status; the target stays stopped."""
    stop_process(target.proc.pid)
    start = time.monotonic()
    status = initiator.write(local, 0, target.mem, 0, nbytes, uid)
    assert status.WaitFor(10000) == code, status.Message()
    assert 0.9 * op_timeout_ms / 1000 < time.monotonic() - start < 5
    assert f"op_timeout_ms={op_timeout_ms}" in status.Message()
    return status


def kill_target_mid_batch(initiator, target, seed: int) -> tuple:
    """With ``target`` a peer_programs.TargetProcess: connects a session from ``initiator`` to the
    whole of the target's memory while the target is alive, stops the target (it can neither take
    the bytes nor answer), starts a batch write of 64 KiB pieces over all of it, checks that it is
    still in progress, then kills the target. Returns the registered source, the session, the
    batch's status and the monotonic time of the kill."""
    piece = 64 * 1024
    initiator.register_remote_engine(target.desc)
    local = register(initiator, random_bytes(target.mem.size, seed))
    session = initiator.create_session(local, target.mem)  # connected and verified while alive
    stop_process(target.proc.pid)
    offsets = list(range(0, target.mem.size, piece))
    status = session.batch_write(offsets, offsets, [piece] * len(offsets), 1)
    time.sleep(0.2)
    assert status.InProgress()
    killed = time.monotonic()
    os.kill(target.proc.pid, signal.SIGKILL)
    return local, session, status, killed
