# SPDX-License-Identifier: MIT
"""The Python mirror of ep_args.h agrees with the compiled one."""

from __future__ import annotations

import ctypes

from mori.ep import _C, layout


def test_args_struct_matches_the_header() -> None:
    constants = _C.constants()
    assert ctypes.sizeof(layout.EpArgs) == constants["ARGS_SIZE"]
    assert layout.CTRL_BYTES == constants["CTRL_BYTES"]
    assert layout.CTRL_ERROR == constants["CTRL_ERROR"]
    assert layout.CTRL_TOTAL_RECV == constants["CTRL_TOTAL_RECV"]
