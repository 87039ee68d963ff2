# SPDX-License-Identifier: MIT
"""Hand-written declarations checked against their originals, and the C/Python layout mirrors."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PACKAGE_ROOT

import mori.shmem
from mori.cco import _C
from mori.cco.layout import CollectiveArgs, DevComm


def _cuda_include() -> Path | None:
    for root in filter(None, [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]):
        if (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    return None


def test_driver_declarations_match_cuda_h() -> None:
    """libmori_cco opens libcuda with dlopen and declares what it uses by hand."""
    include = _cuda_include()
    compiler = shutil.which("c++") or shutil.which("g++")
    if include is None or compiler is None:
        pytest.skip("no CUDA toolkit headers (cuda.h) or no C++ compiler on this machine")
    result = subprocess.run(
        [compiler, "-std=c++17", "-fsyntax-only", f"-I{include}", f"-I{PACKAGE_ROOT / 'src'}",
         f"-I{PACKAGE_ROOT / 'include'}", f"-I{mori.shmem.get_include()}",
         str(PACKAGE_ROOT / "tests" / "native" / "check_cuda_types.cpp")],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_ctypes_mirrors_match_the_c_layouts() -> None:
    constants = _C.constants()
    assert ctypes.sizeof(DevComm) == constants["DEV_COMM_SIZE"]
    assert ctypes.sizeof(CollectiveArgs) == constants["COLLECTIVE_ARGS_SIZE"]


def test_env_lists_every_setting() -> None:
    out = subprocess.run([sys.executable, "-m", "mori.cco", "env"], capture_output=True, text=True, check=True).stdout
    for name in ("MORI_CCO_BACKEND", "MORI_CCO_PER_RANK_VMM", "MORI_CCO_TIMEOUT", "MORI_CCO_CE_QUEUES"):
        assert name in out
