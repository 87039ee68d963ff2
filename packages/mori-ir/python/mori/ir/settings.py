# SPDX-License-Identifier: MIT
"""mori-ir's one registry of environment variables: name, type, default and meaning.

``python -m mori.ir env`` prints the effective values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mori.ir.errors import IrConfigError


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: Any
    doc: str


REGISTRY: tuple[Setting, ...] = (
    Setting(
        "MORI_SHMEM_BC",
        str,
        "",
        "Path of a libmori_shmem_device.bc to use instead of the shipped, cached or built one (MORI's name).",
    ),
    Setting(
        "MORI_IR_CLANG",
        str,
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
    Setting(
        "MORI_SKIP_ABI_CHECK",
        bool,
        False,
        "Import even when the shipped bitcode was built against another mori-shmem ABI version (debugging only; "
        "mori-ep's name for the same check).",
    ),
)

_BY_NAME = {entry.name: entry for entry in REGISTRY}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def setting(name: str) -> Any:
    """The effective value of registered variable ``name``; a malformed value raises ``IrConfigError``."""
    entry = _BY_NAME[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return entry.default
    if entry.kind is bool:
        lowered = text.lower()
        if lowered not in _TRUE | _FALSE:
            raise IrConfigError(f"{name}={text!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")
        return lowered in _TRUE
    return entry.kind(text)


def effective() -> list[tuple[str, str, str]]:
    """(name, effective value, doc) of every registered variable."""
    return [(entry.name, str(setting(entry.name)), entry.doc) for entry in REGISTRY]
