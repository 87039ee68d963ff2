# SPDX-License-Identifier: MIT
"""The Python mirror of ep_args.h agrees with the compiled one."""

from __future__ import annotations

import ctypes

from mori.ep import _C, layout


def test_args_struct_matches_the_header() -> None:
    constants = _C.constants()
    assert ctypes.sizeof(layout.EpArgs) == constants["ARGS_SIZE"]
    assert constants["CTRL_BYTES"] == layout.CTRL_BYTES
    assert constants["CTRL_ERROR"] == layout.CTRL_ERROR
    assert constants["CTRL_TOTAL_RECV"] == layout.CTRL_TOTAL_RECV
    assert constants["CTRL_NET_HOP_SIGNAL"] == layout.CTRL_NET_HOP_SIGNAL
    assert constants["CTRL_NET_REPLY_SIGNAL"] == layout.CTRL_NET_REPLY_SIGNAL
