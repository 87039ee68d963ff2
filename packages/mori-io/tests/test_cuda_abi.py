# SPDX-License-Identifier: MIT
"""mori.io._C declares the CUDA driver API by hand (it builds without CUDA); check it against cuda.h."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent


def _cuda_include() -> Path | None:
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        if (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    return None


def test_driver_declarations_match_cuda_h():
    include = _cuda_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cuda.h) on this machine")
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    result = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", f"-I{include}", f"-I{PACKAGE / 'src'}",
         str(PACKAGE / "tests" / "native" / "check_cuda_abi.cpp")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
