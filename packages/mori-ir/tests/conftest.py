# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-ir test suite (markers, timeouts and ``gpu_available`` come
from mori.testing.pytest_plugin).

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

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
# The spawned PEs inherit sys.path from this process: make triton_programs / triton_kernels
# importable there whatever pytest's import mode is.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# A broken test must fail in seconds, not wait for the default rendezvous or spin timeouts.
os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "30")
os.environ.setdefault("MORI_SHMEM_WAIT_TIMEOUT", "30")


@pytest.fixture(scope="session")
def bitcode_path() -> str:
    """The device bitcode (shipped, cached or built now); skips when none can be had here."""
    from mori.ir.bitcode import find_bitcode
    from mori.ir.errors import BitcodeNotFoundError

    try:
        return str(find_bitcode())
    except BitcodeNotFoundError as exc:
        pytest.skip(f"no mori-ir device bitcode here: {exc}")
