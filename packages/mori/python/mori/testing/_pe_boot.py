# SPDX-License-Identifier: MIT
"""The first code a PE forked from the fork server runs (see :mod:`mori.testing._start`).

``runpy.run_path`` runs this file by path, so that no module of the ``mori`` package is imported
before it (``import mori`` reads MORI_LOG_LEVEL; mori-shmem, mori-ep, ... read their settings when
imported): it makes the process's environment exactly the one the launcher asked for, and only
then imports and calls the PE's entry point.
"""

from __future__ import annotations

import ctypes
import importlib
import os
from typing import Any

#: The name runpy gives this file's run; importing the module (documentation tools) runs nothing.
RUN_NAME = "__mori_pe_boot__"
#: The global that carries (environment, module, qualified name, arguments) into the run.
ARGS_GLOBAL = "MORI_PE_BOOT"


def boot(environ: dict[str, str], module: str, qualname: str, args: tuple[Any, ...]) -> None:
    """Sets os.environ (and so the C environment) to ``environ``, then calls ``module.qualname(*args)``."""
    for name in [name for name in os.environ if name not in environ]:
        del os.environ[name]
    for name, value in environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    entry: Any = importlib.import_module(module)
    for part in qualname.split("."):
        entry = getattr(entry, part)
    try:
        entry(*args)
    finally:
        # A forked child ends with os._exit, which skips the C library's flush that a spawned one
        # gets at exit: keep native code's buffered output in the PE's log.
        ctypes.CDLL(None).fflush(None)


if __name__ == RUN_NAME:
    boot(*globals()[ARGS_GLOBAL])
