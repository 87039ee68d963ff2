# SPDX-License-Identifier: MIT
"""Python's view of mori-shmem's one environment registry (declared in src/core/env.cpp).

Python code reads settings here rather than from os.environ, so a variable has one name, one
default and one doc wherever it is read, and ``python -m mori.shmem env`` lists it.
"""

from __future__ import annotations

from mori.shmem._native import _C


def setting(name: str) -> str:
    """The effective text of registered variable ``name``: its value if set and non-empty, else its default."""
    for entry_name, _kind, _default, _doc, value in _C.env_entries():
        if entry_name == name:
            return value
    raise KeyError(f"{name} is not a registered mori-shmem environment variable")
