# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-ir test suite.

Multi-PE tests run one process per PE through mori.shmem.testing.run_pes; the functions those
processes run live in triton_programs.py and the kernels in triton_kernels.py (module level, so
the spawned PEs can import them). Without a GPU only the compile tests run: every kernel is
compiled by Triton down to a cubin, with the mori-ir bitcode linked in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
# The spawned PEs inherit sys.path from this process: make triton_programs / triton_kernels
# importable there whatever pytest's import mode is.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# A broken test must fail in seconds, not wait for the default rendezvous or spin timeouts.
os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "30")
os.environ.setdefault("MORI_SHMEM_WAIT_TIMEOUT", "30")

# Hard per-test limit (pytest-timeout) for tests that do not set their own.
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


@pytest.fixture(scope="session")
def gpu_available() -> bool:
    """Whether the cuda backend can run here (a CUDA driver and a visible GPU); no context is made
    in this process, the PEs are other processes."""
    import mori.shmem

    return bool(mori.shmem.shmem_cuda_available())


@pytest.fixture(scope="session")
def bitcode_path() -> str:
    """The device bitcode (shipped, cached or built now); skips when none can be had here."""
    from mori.ir.bitcode import find_bitcode
    from mori.ir.errors import BitcodeNotFoundError

    try:
        return str(find_bitcode())
    except BitcodeNotFoundError as exc:
        pytest.skip(f"no mori-ir device bitcode here: {exc}")
