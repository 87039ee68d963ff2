# SPDX-License-Identifier: MIT
"""mori-viz's one registry of environment variables: name, type, default and meaning.

Library code reads settings only through :func:`setting`; ``python -m mori.viz env`` prints the
effective values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mori.viz.errors import ConfigError


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: Any
    doc: str


REGISTRY: tuple[Setting, ...] = (
    Setting(
        "MORI_ENABLE_PROFILER",
        bool,
        False,
        "Compile trace points into JIT kernels: mori.viz.jit_defines() then returns MORI_VIZ_ENABLED=1. "
        "Off, the trace macros compile to nothing.",
    ),
    Setting(
        "MORI_VIZ_EVENTS_PER_WARP",
        int,
        1024,
        "Default ring length per warp slot of a new trace buffer (a power of two); older events are "
        "overwritten when a warp records more.",
    ),
)

_BY_NAME = {entry.name: entry for entry in REGISTRY}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _parse(entry: Setting, text: str) -> Any:
    if entry.kind is bool:
        lowered = text.strip().lower()
        if lowered in _TRUE | _FALSE:
            return lowered in _TRUE
        raise ConfigError(f"{entry.name}={text!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")
    try:
        value = entry.kind(text.strip())
    except ValueError:
        raise ConfigError(f"{entry.name}={text!r} is not a {entry.kind.__name__}") from None
    if entry.kind is int and value <= 0:
        raise ConfigError(f"{entry.name}={text!r} must be > 0")
    return value


def setting(name: str) -> Any:
    """The effective value of registered variable ``name``: parsed from the environment if set and
    non-empty, else the default. A malformed value raises ``ConfigError`` naming it."""
    entry = _BY_NAME[name]
    text = os.environ.get(name, "")
    return _parse(entry, text) if text.strip() else entry.default


def effective() -> list[tuple[str, str, str]]:
    """(name, effective value, doc) of every registered variable."""
    return [(entry.name, str(setting(entry.name)), entry.doc) for entry in REGISTRY]
