# SPDX-License-Identifier: MIT
"""mori.io._C declares the slice of UCX's UCP API it uses by hand (it builds without UCX headers and
opens libucp with dlopen); check those declarations against the ucp.h shipped in the libucx wheel."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import compile_declaration_check


def _ucx_include() -> Path | None:
    spec = importlib.util.find_spec("libucx")  # located, not imported
    if spec is not None and spec.origin:
        include = Path(spec.origin).parent / "include"
        if (include / "ucp" / "api" / "ucp.h").is_file():
            return include
    return None


def test_ucp_declarations_match_ucp_h():
    include = _ucx_include()
    if include is None:
        pytest.skip("the libucx wheel (pip install libucx-cu12) and its ucp.h are not installed")
    compile_declaration_check("check_ucx_abi.cpp", include, "-Wall", "-Wextra", "-Werror")
