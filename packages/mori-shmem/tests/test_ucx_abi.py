# SPDX-License-Identifier: MIT
"""libmori_shmem declares the slice of UCX's UCP it uses by hand (it builds without UCX and opens
libucp with dlopen); check those declarations against the ucp.h of the libucx-cu12 wheel."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import compile_declaration_check

from mori.shmem.settings import libucx_wheel_dir


def test_ucp_declarations_match_ucp_h() -> None:
    lib = libucx_wheel_dir()
    if lib is None:
        pytest.skip("the libucx wheel (libucx-cu12, a test dependency) is not installed")
    include = Path(lib).parent / "include"
    assert (include / "ucp" / "api" / "ucp.h").is_file(), f"the libucx wheel at {lib} ships no ucp/api/ucp.h"
    compile_declaration_check("check_ucx_abi.cpp", include)
