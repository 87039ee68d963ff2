# SPDX-License-Identifier: MIT
"""Python's view of mori-cco's one environment registry (declared in src/core/settings.cpp).

The native library is the one reader of its variables; :data:`REGISTRY` lists them through the
shared mechanism (:class:`mori.settings.NativeRegistry`), so ``python -m mori env`` shows them with
every other package's and flags a size or integer value the library refuses. MORI_ENABLE_SDMA, which
the library also reads, is listed under ``mori`` (:mod:`mori.settings.shared`).
"""

from __future__ import annotations

from mori.cco import _C
from mori.cco.errors import CcoError
from mori.settings import NativeRegistry, shared

#: The library's typed readers, by type name: each raises CcoInvalidArgumentError for a bad value.
_NATIVE_READERS = {"size": _C.setting_size, "int": _C.setting_int}


def _entries() -> list[tuple[str, str, str, str, str]]:
    return [(e["name"], e["type"], e["default"], e["doc"], e["effective"]) for e in _C.settings()]


def _check(name: str) -> str | None:
    """Why the library refuses ``name``'s value, or None (types it has no reader for pass, and so
    does an unset variable without a default, such as MORI_VPOD_ID)."""
    kind, effective = next((entry[1], entry[4]) for entry in _entries() if entry[0] == name)
    reader = _NATIVE_READERS.get(kind)
    if reader is None or not effective.strip():
        return None
    try:
        reader(name)
    except (CcoError, ValueError, RuntimeError) as exc:  # however the binding reports the refusal
        return str(exc)
    return None


REGISTRY = NativeRegistry("mori-cco", _entries, check=_check, exclude=shared.REGISTRY.names())
