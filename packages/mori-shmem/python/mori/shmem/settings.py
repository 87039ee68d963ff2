# SPDX-License-Identifier: MIT
"""Python's view of mori-shmem's one environment registry (declared in src/core/env.cpp).

The native library is the one reader of its variables; :data:`REGISTRY` lists them through the
shared mechanism (:class:`mori.settings.NativeRegistry`), so ``python -m mori env`` shows them with
every other package's. The variables the root declares for every package (MORI_LOG_LEVEL,
MORI_NODE_ID, ...) are in the native registry too, for C users, and listed under ``mori`` only.
The one value Python supplies is MORI_SHMEM_UCX_DIR: where the libucx wheel keeps UCX, which only
Python can find.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from mori.settings import NativeRegistry, shared
from mori.shmem._native import _C


def _check(name: str) -> str | None:
    """Why the library refuses ``name``'s value, or None. Only sizes can be asked today (the C ABI
    exports the library's size parser, mori_shmem_parse_size); other types pass here and init
    raises ConfigError for them."""
    for entry_name, kind, _default, _doc, value in _C.env_entries():
        if entry_name == name and kind == "size":
            try:
                _C.parse_size(value)
            except Exception as exc:  # the library's own refusal, whatever class it maps to
                return f"{name}={value!r} is not valid: {exc}"
    return None


REGISTRY = NativeRegistry("mori-shmem", _C.env_entries, check=_check, exclude=shared.REGISTRY.names())


def setting(name: str) -> str:
    """The effective text of registered variable ``name``: its value if set and non-empty, else its default."""
    return REGISTRY.text(name)


def is_set(name: str) -> bool:
    """True when ``name`` is set to a non-empty value, not left to its default."""
    return REGISTRY.is_set(name)


UCX_DIR = "MORI_SHMEM_UCX_DIR"


def libucx_wheel_dir() -> str | None:
    """The library directory of the ``libucx`` package (the libucx-cu12 wheel), found without
    importing it, or None when it is not installed."""
    spec = importlib.util.find_spec("libucx")
    if spec is None or spec.origin is None:
        return None
    lib = Path(spec.origin).parent / "lib"
    return str(lib) if any((lib / name).exists() for name in ("libucp.so", "libucp.so.0")) else None


def provide_ucx_dir() -> None:
    """Points MORI_SHMEM_UCX_DIR at the libucx wheel's libraries when it is unset, so that init's
    native code (which has no Python to ask) opens that UCX; a value set by the user stands."""
    if setting(UCX_DIR):
        return
    found = libucx_wheel_dir()
    if found is not None:
        os.environ[UCX_DIR] = found
