# SPDX-License-Identifier: MIT
"""mori.io._C declares the CUDA driver API by hand (it builds without CUDA); check it against cuda.h."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import compile_declaration_check


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
    compile_declaration_check("check_cuda_abi.cpp", include)
