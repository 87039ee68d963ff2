# SPDX-License-Identifier: MIT
"""Functions that run an engine in a second process (mori.testing.PeerProcess) for the tests."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from mori.testing import PeerProcess

MiB = 1 << 20
#: Bytes of the memory a target process registers (its seed fills them).
TARGET_BYTES = 32 * MiB


def serve_target(conn: Connection, nbytes: int, seed: int) -> None:
    """A target engine owning nbytes of seeded random data; answers commands over conn:
    ("desc",) -> (engine desc bytes, memory desc bytes); ("digest", off, n) -> sha256 hex;
    ("bytes", off, n) -> bytes; ("register", desc bytes); ("pop", key, uid) -> code or None;
    ("exit",)."""
    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType

    buf = np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)
    engine = IOEngine("target", IOEngineConfig())
    engine.create_backend(BackendType.TCP)
    mem = engine.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    conn.send((engine.get_engine_desc().pack(), mem.pack()))
    answer_commands(conn, engine, buf)


def answer_commands(conn: Connection, engine: Any, buf: np.ndarray) -> None:
    """The target side of the commands above, for an engine owning buf; returns after ("exit",)."""
    from mori.io import EngineDesc

    while True:
        cmd = conn.recv()
        if cmd[0] == "digest":
            conn.send(hashlib.sha256(buf[cmd[1] : cmd[1] + cmd[2]].tobytes()).hexdigest())
        elif cmd[0] == "bytes":
            conn.send(buf[cmd[1] : cmd[1] + cmd[2]].tobytes())
        elif cmd[0] == "register":
            engine.register_remote_engine(EngineDesc.unpack(cmd[1]))
            conn.send(True)
        elif cmd[0] == "pop":
            status = engine.pop_inbound_transfer_status(cmd[1], cmd[2])
            conn.send(None if status is None else int(status.Code()))
        elif cmd[0] == "exit":
            engine.shutdown()
            conn.send(True)
            return


class TargetProcess(PeerProcess):
    """The test's handle on a target started in a spawned process: ``fn(conn, *args)`` first sends
    (engine desc bytes, memory desc bytes), then answers commands (answer_commands); ``close()``
    kills it."""

    def __init__(self, fn: Callable[..., None], *args: Any) -> None:
        from mori.io import EngineDesc, MemoryDesc

        super().__init__(fn, *args, name="target")
        engine_desc, mem_desc = self.recv(60, what="its engine and memory descriptors")
        self.desc, self.mem = EngineDesc.unpack(engine_desc), MemoryDesc.unpack(mem_desc)
