# SPDX-License-Identifier: MIT
"""Where mori-cco's C++ SDK lives in this install: ``include/`` (cco.hpp, dev_comm.h, the device
headers) and ``lib/libmori_cco.so``. C++ programs also need mori-shmem's include directory."""

from __future__ import annotations

from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def get_include() -> str:
    """The directory holding ``mori_cco/cco.hpp``."""
    return str(_ROOT / "include")


def get_library_dir() -> str:
    """The directory holding ``libmori_cco.so``."""
    return str(_ROOT / "lib")
