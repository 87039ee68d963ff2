# SPDX-License-Identifier: MIT
"""Loads the one libmori_shmem.so of this wheel, then the pybind11 layer over it.

The library is loaded with RTLD_GLOBAL before anything else so that every extension linked
against it (mori.shmem._C, mori.ep._C, ...) binds to this single copy: one heap, one bootstrap.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

LIBRARY_PATH = Path(__file__).resolve().parent / "lib" / "libmori_shmem.so"

_library = ctypes.CDLL(str(LIBRARY_PATH), mode=ctypes.RTLD_GLOBAL)

from mori.shmem import _C as _C  # noqa: E402  (must follow the preload; re-exported)
from mori.shmem.errors import STATUS_CLASSES  # noqa: E402

_C.set_error_classes(STATUS_CLASSES)

__all__ = ["LIBRARY_PATH", "_C"]
