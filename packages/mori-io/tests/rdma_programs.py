# SPDX-License-Identifier: MIT
"""Helpers of the RDMA (UCX) tests, and the target engine they run in a second process
(module level so multiprocessing's spawn can import it)."""

from __future__ import annotations

import os
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
from peer_programs import answer_commands


def ucx_unavailable() -> str:
    """Empty when UCX loads here (the libucx wheel, MORI_IO_UCX_LIB_DIR or the system's), else why not."""
    from mori.io._native import _C
    from mori.io.config import ucx_library_dir
    from mori.io.errors import UnsupportedError

    try:
        _C.ucx_version(ucx_library_dir()[0])
        return ""
    except UnsupportedError as exc:
        return str(exc)


def rdma_engine(key: str, tcp: bool = False, **rdma: Any):
    """An engine on loopback with the RDMA backend (config fields as keywords), and TCP if asked."""
    from mori.io import BackendType, IOEngine, IOEngineConfig, RdmaBackendConfig, TcpBackendConfig

    engine = IOEngine(key, IOEngineConfig())
    engine.create_backend(BackendType.RDMA, RdmaBackendConfig(**rdma))
    if tcp:
        engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=2))
    return engine


def serve_rdma_target(conn: Connection, nbytes: int, seed: int, tls: str | None, with_tcp: bool) -> None:
    """Owns nbytes of seeded random data behind an engine with the RDMA backend (and TCP when
    with_tcp); answers over conn: ("digest", off, n) -> sha256 hex; ("bytes", off, n) -> bytes;
    ("register", engine desc bytes); ("pop", key, uid) -> code or None; ("exit",)."""
    if tls is None:
        os.environ.pop("UCX_TLS", None)
    else:
        os.environ["UCX_TLS"] = tls
    from mori.io import BackendType, IOEngine, IOEngineConfig, MemoryLocationType

    buf = np.random.default_rng(seed).integers(0, 256, size=nbytes, dtype=np.uint8)
    engine = IOEngine("target", IOEngineConfig())
    engine.create_backend(BackendType.RDMA)
    if with_tcp:
        engine.create_backend(BackendType.TCP)
    mem = engine.register_memory(buf.ctypes.data, buf.nbytes, -1, MemoryLocationType.CPU)
    conn.send((engine.get_engine_desc().pack(), mem.pack()))
    answer_commands(conn, engine, buf)
