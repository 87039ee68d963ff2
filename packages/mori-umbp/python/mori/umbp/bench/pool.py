# SPDX-License-Identifier: MIT
"""A pool in a process of its own for ``mori-umbp-bench ops``: a master, storage peers and a bare
mori-io target for the data-plane ceiling, so the replaying client shares no interpreter with them.

The child answers on a pipe with (master address, the target's packed engine and memory
descriptors, its pid) and serves until the pipe says stop (or closes).
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

#: Seconds the parent waits for the child's pool to come up.
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PoolInfo:
    master: str
    target_engine: bytes
    target_mem: bytes
    target_bytes: int
    pid: int


def _serve(conn: Connection, peers: int, capacity: int, page: int, target_bytes: int) -> None:
    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType, TcpBackendConfig
    from mori.umbp.bench.cli import _client
    from mori.umbp.master.server import MasterServer, MasterServerConfig

    logging.basicConfig(level=logging.WARNING)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(MasterServer(MasterServerConfig(listen_address="127.0.0.1:0")))
        for i in range(peers):
            stack.enter_context(_client(server.address, f"bench-peer-{i}", capacity, page, max(page, 4 << 20)))
        engine = IOEngine("bench-ceiling-target", IOEngineConfig(host="127.0.0.1", port=0))
        stack.callback(engine.shutdown)
        engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=2))
        buf = np.zeros(target_bytes, np.uint8)
        mem = engine.register_memory(buf.ctypes.data, target_bytes, -1, MemoryLocationType.CPU)
        stack.callback(engine.deregister_memory, mem)
        conn.send(PoolInfo(server.address, engine.get_engine_desc().pack(), mem.pack(), target_bytes, os.getpid()))
        with contextlib.suppress(EOFError):
            conn.recv()


class PoolProcess:
    """The child pool; a context manager that stops it on exit."""

    def __init__(self, peers: int, capacity: int, page: int, target_bytes: int) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self.proc: Any = ctx.Process(target=_serve, args=(child, peers, capacity, page, target_bytes), daemon=True)
        self.proc.start()
        child.close()
        if not self._conn.poll(START_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"the bench pool did not start within {START_TIMEOUT_S:.0f}s")
        self.info: PoolInfo = self._conn.recv()

    def cpu_s(self) -> float:
        """User plus system CPU seconds the pool process has used."""
        with open(f"/proc/{self.info.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self.proc.join(20)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)

    def __enter__(self) -> PoolProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
