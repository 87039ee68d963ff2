# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-ep test suite.

Multi-PE tests run one process per PE through mori.shmem.testing.run_pes; the functions those
processes run live in ep_programs.py. Every dispatch/combine test runs on the cpu backend here and
on the cuda backend where a GPU is visible (several PEs share it under MPS; docs/developer-guide/gpu.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # the spawned PEs import ep_programs from here

# Small heaps on 2-core CI machines; a broken test must fail in seconds.
os.environ.setdefault("MORI_SHMEM_HEAP_SIZE", "256M")
os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "60")
os.environ.setdefault("MORI_EP_TIMEOUT", "60")

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


def _gpu_available() -> bool:
    import mori.shmem

    return mori.shmem.shmem_cuda_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend that exists: cpu always, cuda where a GPU is visible."""
    if request.param == "cuda" and not _gpu_available():
        pytest.skip("cuda backend: no NVIDIA GPU / CUDA driver on this machine")
    return str(request.param)
