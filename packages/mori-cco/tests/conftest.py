# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-cco tests.

Multi-rank tests run one process per rank through mori.shmem.testing.run_pes (it hands every rank
a unique id in mori-shmem's format, which mori-cco shares); the functions the ranks run live in
cco_programs.py. Every test runs on the cpu backend, and on cuda where a GPU is visible (several
ranks share it under MPS, docs/developer-guide/gpu.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # the spawned ranks import cco_programs from here

os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "60")
os.environ.setdefault("MORI_CCO_TIMEOUT", "60")
# Slots are backed on demand; small ones keep /dev/shm use bounded when a test leaks a process.
os.environ.setdefault("MORI_CCO_PER_RANK_VMM", "256M")

DEFAULT_TEST_TIMEOUT_S = 300


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few tens of seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skips with the reason elsewhere)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))


def gpu_available() -> bool:
    import mori.shmem

    return bool(mori.shmem.shmem_cuda_available())


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend that exists: cpu always, cuda where a GPU is visible."""
    if request.param == "cuda" and not gpu_available():
        pytest.skip("cuda backend: no NVIDIA GPU / CUDA driver on this machine")
    return str(request.param)


def backend_env(backend: str, ranks_per_node: int = 0, **extra: str) -> dict[str, str]:
    """The children's environment: the backend, and with ranks_per_node > 0 one host standing for
    nodes of that many ranks (MORI_CCO_RANKS_PER_NODE); extra adds any other variable."""
    env = {"MORI_CCO_BACKEND": backend, **extra}
    if ranks_per_node > 0:
        env["MORI_CCO_RANKS_PER_NODE"] = str(ranks_per_node)
    return env
