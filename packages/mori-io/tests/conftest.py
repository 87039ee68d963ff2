# SPDX-License-Identifier: MIT
"""Shared fixtures of the mori-io suite: engines on loopback with short deadlines, CPU buffers.

Second engines that must live in another process run functions from peer_programs.py (module
level so multiprocessing's spawn can import them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # spawned children inherit sys.path

# A broken test must fail in seconds, not after the 30 s default deadlines. Children inherit these.
os.environ.setdefault("MORI_IO_CP_TIMEOUT_MS", "3000")
os.environ.setdefault("MORI_IO_TCP_OP_TIMEOUT_MS", "10000")

DEFAULT_TEST_TIMEOUT_S = 60

try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "mori-io",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mori-io"))
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few tens of seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU and torch (skips with the reason elsewhere)")
    if not config.pluginmanager.hasplugin("timeout"):  # the GPU machine has no pytest-timeout
        config.addinivalue_line("markers", "timeout(seconds): deadline of a test under pytest-timeout")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))


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


PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def compile_declaration_check(source: str, include: Path, *flags: str) -> None:
    """Compiles tests/native/<source> (never run) against the real headers in `include` and this
    package's src/: its static_asserts compare the hand-written declarations the library builds
    with (it opens those libraries with dlopen) with the originals."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    result = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", *flags, f"-I{include}", f"-I{PACKAGE_ROOT / 'src'}",
         str(PACKAGE_ROOT / "tests" / "native" / source)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
