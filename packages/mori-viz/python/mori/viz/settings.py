# SPDX-License-Identifier: MIT
"""mori-viz's environment variables, declared once with the shared mechanism (:mod:`mori.settings`).

Library code reads settings only through :func:`setting`; ``python -m mori.viz env`` prints the
effective values. MORI_ENABLE_PROFILER is shared with mori-ep (:mod:`mori.settings.shared`).
"""

from __future__ import annotations

from typing import Any

from mori.settings import Registry, Setting
from mori.viz.errors import ConfigError

REGISTRY = Registry(
    "mori-viz",
    (
        Setting(
            "MORI_VIZ_EVENTS_PER_WARP",
            int,
            1024,
            "Default ring length per warp slot of a new trace buffer (a power of two); older events are "
            "overwritten when a warp records more.",
            low=1,
        ),
    ),
    error=ConfigError,
    shared=("MORI_ENABLE_PROFILER",),
)


def setting(name: str) -> Any:
    """The effective value of registered variable ``name`` (or the shared MORI_ENABLE_PROFILER):
    parsed from the environment if set and non-empty, else the default. A malformed value raises
    ``ConfigError`` naming it."""
    return REGISTRY.get(name)
