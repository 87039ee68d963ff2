# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-ep test suite (markers, timeouts and the ``backend`` fixture
come from mori.testing.pytest_plugin).

Multi-PE tests run one process per PE through mori.shmem.testing.run_pes; the functions those
processes run live in ep_programs.py. Every dispatch/combine test runs on the cpu backend here and
on the cuda backend where a GPU is visible (several PEs share it under MPS; docs/developer-guide/gpu.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # the spawned PEs import ep_programs from here

# Small heaps on 2-core CI machines; a broken test must fail in seconds.
os.environ.setdefault("MORI_SHMEM_HEAP_SIZE", "256M")
os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "60")
os.environ.setdefault("MORI_EP_TIMEOUT", "60")
