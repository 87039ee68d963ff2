# SPDX-License-Identifier: MIT
"""Hand-written declarations checked against their originals, and the C/Python layout mirrors."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest
from conftest import PACKAGE_ROOT

import mori.shmem
from mori.cco import _C
from mori.cco.layout import CollectiveArgs, DevComm
from mori.testing.native import compile_declaration_check, cuda_include


def test_driver_declarations_match_cuda_h() -> None:
    """libmori_cco opens libcuda with dlopen and declares what it uses by hand."""
    include = cuda_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cuda.h) on this machine")
    compile_declaration_check(
        PACKAGE_ROOT, "check_cuda_types.cpp", include, f"-I{PACKAGE_ROOT / 'include'}", f"-I{mori.shmem.get_include()}"
    )


def test_ctypes_mirrors_match_the_c_layouts() -> None:
    constants = _C.constants()
    assert ctypes.sizeof(DevComm) == constants["DEV_COMM_SIZE"]
    assert ctypes.sizeof(CollectiveArgs) == constants["COLLECTIVE_ARGS_SIZE"]


def test_env_lists_every_setting() -> None:
    out = subprocess.run([sys.executable, "-m", "mori.cco", "env"], capture_output=True, text=True, check=True).stdout
    for name in ("MORI_CCO_BACKEND", "MORI_CCO_PER_RANK_VMM", "MORI_CCO_TIMEOUT", "MORI_CCO_CE_QUEUES"):
        assert name in out
