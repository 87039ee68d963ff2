# SPDX-License-Identifier: MIT
"""mori-ir's environment variables, declared once with the shared mechanism (:mod:`mori.settings`).

``python -m mori.ir env`` prints the effective values. MORI_SKIP_ABI_CHECK is shared with mori-ep
(:mod:`mori.settings.shared`).
"""

from __future__ import annotations

from typing import Any

from mori.ir.errors import IrConfigError
from mori.settings import Registry, Setting

REGISTRY = Registry(
    "mori-ir",
    (
        Setting(
            "MORI_SHMEM_BC",
            "path",
            "",
            "Path of a libmori_shmem_device.bc to use instead of the shipped, cached or built one (MORI's name).",
        ),
        Setting(
            "MORI_IR_CLANG",
            "path",
            "",
            "The clang that builds the bitcode when none is shipped (default: the newest clang-NN or clang on PATH, "
            "version 17 or later, with the NVPTX target).",
        ),
        Setting(
            "MORI_DISABLE_JIT",
            bool,
            False,
            "Never build the bitcode at run time: use MORI_SHMEM_BC, the shipped file or the cache, else fail.",
        ),
    ),
    error=IrConfigError,
    shared=("MORI_SKIP_ABI_CHECK",),
)


def setting(name: str) -> Any:
    """The effective value of registered variable ``name``; a malformed value raises ``IrConfigError``."""
    return REGISTRY.get(name)
