# SPDX-License-Identifier: MIT
"""mori.io._C declares the CUDA driver API by hand (it builds without CUDA); check it against cuda.h."""

from __future__ import annotations

import pytest
from conftest import compile_declaration_check

from mori.testing.native import cuda_include


def test_driver_declarations_match_cuda_h():
    include = cuda_include()
    if include is None:
        pytest.skip("no CUDA toolkit headers (cuda.h) on this machine")
    compile_declaration_check("check_cuda_abi.cpp", include)
