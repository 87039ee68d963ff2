# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-shmem test suite (markers, timeouts, ``gpu_available`` and the
hypothesis profile come from mori.testing.pytest_plugin).

Every multi-PE test runs its PEs as separate processes through mori.shmem.testing.run_pes; the
functions those processes run live in pe_programs.py (module level, so they can be pickled, and
importing only numpy + mori.shmem so that spawning is cheap).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent
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


def pytest_mori_default_timeout(config: pytest.Config) -> float:
    return 180


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "torch: needs PyTorch")
    config.addinivalue_line("markers", "mpi: needs mpiexec and mpi4py")


@pytest.fixture(scope="session")
def shmem():
    """The mori.shmem module (imported lazily so collection errors name the missing wheel)."""
    import mori.shmem

    return mori.shmem
