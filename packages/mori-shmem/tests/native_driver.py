# SPDX-License-Identifier: MIT
"""Builds a small C++ driver (tests/native/<name>.cpp) with the library sources it tests, so a test
can run one piece of the native code alone; skips the test where no C++ compiler is found."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PACKAGE_ROOT

import mori
import mori.shmem


def build_native_driver(work: Path, name: str, *library_sources: str) -> Path:
    """``work``/``name``, built from tests/native/``name``.cpp and ``library_sources`` (paths under src/)."""
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    exe = work / name
    sources = [PACKAGE_ROOT / "tests" / "native" / f"{name}.cpp", *(PACKAGE_ROOT / "src" / s for s in library_sources)]
    subprocess.run(
        [
            compiler,
            "-std=c++17",
            "-O0",
            "-pthread",
            f"-I{PACKAGE_ROOT / 'src'}",
            # The installed SDK's headers: include/ with the version.h the build generates, and the
            # root package's (mori/hmac_sha256.hpp).
            f"-I{mori.shmem.get_include()}",
            f"-I{mori.get_include()}",
            "-o",
            str(exe),
            *map(str, sources),
        ],
        check=True,
        timeout=120,
    )
    return exe
