# SPDX-License-Identifier: MIT
"""Shared fixtures of the mori-io suite: engines on loopback with short deadlines, CPU buffers
(markers, timeouts and the hypothesis profile come from mori.testing.pytest_plugin).

Second engines that must live in another process run functions from peer_programs.py (module
level so multiprocessing's spawn can import them) under mori.testing.PeerProcess.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mori.testing import native

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # spawned children inherit sys.path

# A broken test must fail in seconds, not after the 30 s default deadlines. Children inherit these.
os.environ.setdefault("MORI_IO_CP_TIMEOUT_MS", "3000")
os.environ.setdefault("MORI_IO_TCP_OP_TIMEOUT_MS", "10000")

#: compile_declaration_check(source, include, *flags): tests/native/<source> against real headers.
compile_declaration_check = functools.partial(native.compile_declaration_check, PACKAGE_ROOT)


def pytest_mori_default_timeout(config: pytest.Config) -> float:
    return 60


def new_engine(key: str, lanes: int = 4, **tcp: int):
    from mori.io import BackendType, IOEngine, IOEngineConfig, TcpBackendConfig

    engine = IOEngine(key, IOEngineConfig())
    engine.create_backend(BackendType.TCP, TcpBackendConfig(num_data_conns=lanes, **tcp))
    return engine


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
