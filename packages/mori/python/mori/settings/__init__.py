# SPDX-License-Identifier: MIT
"""The one settings mechanism of the mori family.

A package declares its environment variables once, as :class:`Setting` objects in a
:class:`Registry` of its distribution (``mori.<pkg>.settings.REGISTRY``), and lists that registry in
its ``pyproject.toml`` so that ``python -m mori env`` finds it when it is installed::

    [project.entry-points."mori.settings"]
    mori-io = "mori.io.settings:REGISTRY"

Library code reads a value with ``REGISTRY.get(name)`` (typed and validated: a bad value raises the
package's config error, naming the variable, the value and the limit). Tests and callers pass values
without touching ``os.environ`` through :func:`override`. A native library's own registry is listed
through :class:`NativeRegistry`, so that library stays the one reader of its variables. The
variables every package shares (logging, MORI_ENABLE_PROFILER, ...) are in :mod:`mori.settings.shared`.
"""

from __future__ import annotations

from mori.settings._registry import (
    GROUP,
    Entry,
    NativeRegistry,
    NativeSetting,
    Registry,
    override,
    registries,
    registry_of,
)
from mori.settings._setting import TYPES, InvalidValue, Setting, parse_bool, parse_size

__all__ = [
    "GROUP",
    "TYPES",
    "Entry",
    "InvalidValue",
    "NativeRegistry",
    "NativeSetting",
    "Registry",
    "Setting",
    "override",
    "parse_bool",
    "parse_size",
    "registries",
    "registry_of",
]
