# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-cco tests (markers, timeouts and the ``backend`` fixture come
from mori.testing.pytest_plugin).

Multi-rank tests run one process per rank through mori.shmem.testing.run_pes (it hands every rank
a unique id in mori-shmem's format, which mori-cco shares); the functions the ranks run live in
cco_programs.py. Every test runs on the cpu backend, and on cuda where a GPU is visible (several
ranks share it under MPS, docs/developer-guide/gpu.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # the spawned ranks import cco_programs from here

os.environ.setdefault("MORI_BOOTSTRAP_TIMEOUT", "60")
os.environ.setdefault("MORI_CCO_TIMEOUT", "60")
# Slots are backed on demand; small ones keep /dev/shm use bounded when a test leaks a process.
os.environ.setdefault("MORI_CCO_PER_RANK_VMM", "256M")


def pytest_mori_preload(config: object) -> list[str]:
    return ["torch"]  # most ranks import it (cco_programs): the fork server imports it once for all


def backend_env(backend: str, ranks_per_node: int = 0, **extra: str) -> dict[str, str]:
    """The children's environment: the backend, and with ranks_per_node > 0 one host standing for
    nodes of that many ranks (MORI_CCO_RANKS_PER_NODE); extra adds any other variable."""
    env = {"MORI_CCO_BACKEND": backend, **extra}
    if ranks_per_node > 0:
        env["MORI_CCO_RANKS_PER_NODE"] = str(ranks_per_node)
    return env
