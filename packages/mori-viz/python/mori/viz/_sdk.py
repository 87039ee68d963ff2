# SPDX-License-Identifier: MIT
"""Where mori-viz's device headers live, and the JIT defines that switch them on."""

from __future__ import annotations

from pathlib import Path

from mori.viz.settings import setting

_ROOT = Path(__file__).resolve().parent

#: The define that compiles trace points in (mori_viz/trace.cuh); absent or 0 compiles them out.
ENABLE_DEFINE = "MORI_VIZ_ENABLED"


def get_include() -> str:
    """Directory to add to the include path: it holds ``mori_viz/trace.cuh`` and ``mori_viz/layout.h``."""
    installed = _ROOT / "include"
    if installed.is_dir():
        return str(installed)
    # Running from a source checkout (packages/mori-viz/python/mori/viz): the headers sit at the
    # package root, where the wheel build picks them up.
    return str(_ROOT.parents[2] / "include")


def profiler_enabled() -> bool:
    """Whether MORI_ENABLE_PROFILER asks for trace points in JIT kernels."""
    return bool(setting("MORI_ENABLE_PROFILER"))


def jit_defines(enabled: bool | None = None) -> dict[str, int]:
    """The ``#define``s to compile a kernel with: ``{MORI_VIZ_ENABLED: 1}`` when profiling is on
    (``enabled``, else MORI_ENABLE_PROFILER), else ``{}``, so an unprofiled build renders (and is
    cached) exactly as a kernel that never heard of mori-viz."""
    on = profiler_enabled() if enabled is None else enabled
    return {ENABLE_DEFINE: 1} if on else {}
