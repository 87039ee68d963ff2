# SPDX-License-Identifier: MIT
"""Checks of hand-written native declarations against the real headers, for the packages' tests
(imports pytest: for test code only)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def cuda_include() -> Path | None:
    """The CUDA toolkit's include folder (the one holding cuda.h), or None where there is none."""
    for root in filter(None, [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]):
        if (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    return None


def compile_declaration_check(package_root: Path, source: str, include: Path, *flags: str) -> None:
    """Compiles ``<package_root>/tests/native/<source>`` (never run) against the real headers in
    ``include`` and the package's src/: its static_asserts compare the hand-written declarations the
    library builds with (it opens those libraries with dlopen) with the originals. Skips without a
    C++ compiler."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    result = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", *flags, f"-I{include}", f"-I{package_root / 'src'}",
         str(package_root / "tests" / "native" / source)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
