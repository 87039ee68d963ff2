# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-shmem test suite.

Every multi-PE test runs its PEs as separate processes through mori.shmem.testing.run_pes; the
functions those processes run live in pe_programs.py (module level, so they can be pickled, and
importing only numpy + mori.shmem so that spawning is cheap).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# pe_programs must be importable in the spawned PEs whatever pytest's import mode is: the spawned
# processes inherit sys.path from this process.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# Small heaps: the suite runs on 2-core CI machines with little /dev/shm. Children inherit this;
# tests assert against HEAP_SIZE, so it is forced, not defaulted.
os.environ["MORI_SHMEM_HEAP_SIZE"] = "64M"
# The suite tests the cpu backend unless a test asks for cuda (test_cuda_backend, test_device_api):
# on a GPU machine "auto" would otherwise move every host-memory test onto GPU memory.
os.environ.setdefault("MORI_SHMEM_BACKEND", "cpu")
# A broken test must fail in seconds, not wait for the 60 s default rendezvous timeout.
os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "30")
os.environ.setdefault("MORI_SHMEM_WAIT_TIMEOUT", "30")

HEAP_SIZE = 64 * 1024 * 1024

# Hard per-test limit (pytest-timeout) for tests that do not set their own.
DEFAULT_TEST_TIMEOUT_S = 180

try:
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "mori",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mori"))
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    pass


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few tens of seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "torch: needs PyTorch")
    config.addinivalue_line("markers", "mpi: needs mpiexec and mpi4py")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skips with the reason elsewhere)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))


@pytest.fixture(scope="session")
def shmem():
    """The mori.shmem module (imported lazily so collection errors name the missing wheel)."""
    import mori.shmem

    return mori.shmem


@pytest.fixture(scope="session")
def gpu_available() -> bool:
    """Whether the cuda backend can run here (a CUDA driver and a visible GPU); no context is made
    in this process, the PEs are other processes."""
    import mori.shmem

    return mori.shmem.shmem_cuda_available()


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
