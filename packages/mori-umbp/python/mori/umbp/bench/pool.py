# SPDX-License-Identifier: MIT
"""A pool in processes of its own for ``mori-umbp-bench``: a master, storage peers and a bare
mori-io target for the data-plane ceiling, so the replaying client shares no interpreter with them.

Two layouts (``--pool-layout``):

- ``processes``: the master and each peer in a process of its own, as separate hosts would run
  them (the ceiling's target lives in the first peer's process, beside the pages it measures);
- ``single``: master, peers and target in one process (the layout before ``--pool-layout``),
  whose one interpreter serves every RPC of the pool one after another.

Each child answers on a pipe with what it serves (or the exception that stopped it) and its pid,
and serves until the pipe says stop (or closes).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from mori.umbp.errors import InvalidArgumentError

#: Seconds the parent waits for each child of the pool to come up.
START_TIMEOUT_S = 60.0
LAYOUTS = ("processes", "single")


@dataclass(frozen=True)
class PeerSpec:
    capacity: int
    page: int
    hbm: int = 0
    policy: str = "lru"


@dataclass(frozen=True)
class PoolInfo:
    master: str
    target_engine: bytes
    target_mem: bytes
    target_bytes: int
    pids: tuple[int, ...]
    #: (engine, memory) of a target of ``target_bytes`` in every process that holds peers, the
    #: first one's first: the ceiling of a transfer spread over the peers as a batch is.
    targets: tuple[tuple[bytes, bytes], ...] = ()


def _target(stack: contextlib.ExitStack, target_bytes: int) -> tuple[bytes, bytes, np.ndarray | None]:
    """A bare mori-io engine with one registered buffer (the ceiling's other end): the packed
    engine and memory descriptors, and the buffer, which the caller keeps alive while it serves."""
    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, TcpBackendConfig

    if target_bytes <= 0:
        return b"", b"", None
    engine = IOEngine(f"bench-ceiling-target-{os.getpid()}", IOEngineConfig(host="127.0.0.1", port=0))
    stack.callback(engine.shutdown)
    engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=2))
    buf = np.zeros(target_bytes, np.uint8)
    mem = engine.register_memory(buf.ctypes.data, target_bytes, -1, MemoryLocationType.CPU)
    stack.callback(engine.deregister_memory, mem)
    return engine.get_engine_desc().pack(), mem.pack(), buf


def _peer(stack: contextlib.ExitStack, master: str, i: int, spec: PeerSpec) -> None:
    from mori.umbp.bench.cli import _client

    staging = max(spec.page, 4 << 20)
    stack.enter_context(_client(master, f"bench-peer-{i}", spec.capacity, spec.page, staging, spec.hbm, spec.policy))


def _serve(conn: Connection, role: str, master: str, peers: list[int], spec: PeerSpec, target_bytes: int) -> None:
    """``role``: "master" (a master, plus ``peers`` in this process), or "peers" (``peers`` of the
    pool at ``master``). A target of ``target_bytes`` comes with every process that holds peers."""
    from mori.umbp.master.server import MasterServer, MasterServerConfig

    logging.basicConfig(level=logging.WARNING)
    with contextlib.ExitStack() as stack:
        try:
            if role == "master":
                master = stack.enter_context(MasterServer(MasterServerConfig(listen_address="127.0.0.1:0"))).address
            for i in peers:
                _peer(stack, master, i, spec)
            engine, mem, _buf = _target(stack, target_bytes if peers else 0)
        except Exception as exc:  # the parent re-raises it (e.g. an HBM tier without a GPU)
            conn.send(("error", exc))
            return
        conn.send(("ok", (master, engine, mem, os.getpid())))
        with contextlib.suppress(EOFError):
            conn.recv()


class PoolProcess:
    """The pool's children; a context manager that stops them on exit."""

    def __init__(
        self, peers: int, capacity: int, page: int, target_bytes: int, layout: str = "processes", **peer: Any
    ) -> None:
        if layout not in LAYOUTS:
            raise InvalidArgumentError(f"pool layout={layout!r} is not one of {', '.join(LAYOUTS)}")
        spec = PeerSpec(capacity, page, **peer)
        self._children: list[tuple[Connection, Any]] = []
        try:
            if layout == "single":
                answers = [self._start("master", "", list(range(peers)), spec, target_bytes)]
                master = answers[0][0]
            else:
                answers = [self._start("master", "", [], spec, 0)]
                master = answers[0][0]
                answers += [self._start("peers", master, [i], spec, target_bytes) for i in range(peers)]
        except BaseException:
            self.close()
            raise
        targets = tuple((e, m) for _, e, m, _ in answers if e)
        engine, mem = targets[0] if targets else (b"", b"")
        pids = tuple(a[3] for a in answers)
        self.info = PoolInfo(master, engine, mem, target_bytes if engine else 0, pids, targets)

    def _start(self, role: str, master: str, peers: list[int], spec: PeerSpec, target: int) -> Any:
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, role, master, peers, spec, target), daemon=True)
        proc.start()
        child.close()
        self._children.append((conn, proc))
        if not conn.poll(START_TIMEOUT_S):
            raise RuntimeError(f"the bench pool's {role} did not start within {START_TIMEOUT_S:.0f}s")
        try:
            status, body = conn.recv()
        except EOFError:
            raise RuntimeError(f"the bench pool's {role} exited while starting") from None
        if status == "error":
            raise body
        return body

    def cpu_s(self) -> float:
        """User plus system CPU seconds the pool's processes have used."""
        total = 0.0
        for pid in self.info.pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def close(self) -> None:
        # Peers first, then the master: a peer that outlives its master retries its heartbeats.
        for conn, proc in reversed(self._children):
            with contextlib.suppress(OSError):
                conn.send("stop")
            proc.join(20)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()
        self._children.clear()

    def __enter__(self) -> PoolProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
