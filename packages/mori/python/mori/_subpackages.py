# SPDX-License-Identifier: MIT
"""Which wheel provides each ``mori.<name>``, and the error that says so when it is absent."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True, slots=True)
class Subpackage:
    """``mori.<name>`` is the module ``module``, shipped in the distribution ``wheel``."""

    module: str
    wheel: str
    note: str = ""


SUBPACKAGES: dict[str, Subpackage] = {
    "cpp": Subpackage("mori.cpp", "mori"),
    "shmem": Subpackage("mori.shmem", "mori-shmem"),
    "jit": Subpackage("mori.shmem.jit", "mori-shmem", "MORI's mori.jit is mori.shmem.jit here"),
    "ep": Subpackage("mori.ep", "mori-ep"),
    "ops": Subpackage("mori.ops", "mori-ep"),
    "jax": Subpackage("mori.jax", "mori-ep"),
    "cco": Subpackage("mori.cco", "mori-cco"),
    "ccl": Subpackage("mori.ccl", "mori-cco", "MORI's CCL collectives are mori.cco's communicators here"),
    "ir": Subpackage("mori.ir", "mori-ir"),
    "viz": Subpackage("mori.viz", "mori-viz"),
    "kernel_profiler": Subpackage("mori.kernel_profiler", "mori-viz"),
    "io": Subpackage("mori.io", "mori-io"),
    "umbp": Subpackage("mori.umbp", "mori-umbp"),
}


def missing_wheel_error(name: str) -> ModuleNotFoundError:
    """The error for a ``mori.<name>`` that cannot be imported: it names the wheel that provides it."""
    sub = SUBPACKAGES[name]
    hint = f" ({sub.note})" if sub.note else ""
    try:
        installed = importlib.metadata.version(sub.wheel)
    except importlib.metadata.PackageNotFoundError:
        message = (
            f"{sub.module} is provided by the {sub.wheel} wheel, which is not installed{hint}: "
            f'pip install {sub.wheel} (or pip install "mori[all]")'
        )
    else:
        message = f"{sub.module} is not part of the installed {sub.wheel} {installed}{hint}"
    return ModuleNotFoundError(message, name=sub.module)


class _MissingWheelFinder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: reached only when no finder found a ``mori.<name>``; names its wheel."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, rest = fullname.partition(".")
        if prefix != "mori" or not rest or "." in rest or rest not in SUBPACKAGES:
            return None
        if SUBPACKAGES[rest].module != fullname:  # an alias such as mori.jit: no module of that name
            return None
        raise missing_wheel_error(rest)


def install_missing_wheel_hint() -> None:
    if not any(isinstance(finder, _MissingWheelFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MissingWheelFinder())
