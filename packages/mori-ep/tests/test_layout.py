# SPDX-License-Identifier: MIT
"""The Python mirror of ep_args.h agrees with the compiled one, and its error codes map to their
exceptions."""

from __future__ import annotations

import ctypes

import ep_programs
import pytest

from mori.ep import _C, layout
from mori.ep.errors import EpInputError, EpOverflowError, EpTimeoutError
from mori.ep.workload import Workload


def test_args_struct_matches_the_header() -> None:
    constants = _C.constants()
    assert ctypes.sizeof(layout.EpArgs) == constants["ARGS_SIZE"]
    assert constants["CTRL_BYTES"] == layout.CTRL_BYTES
    assert constants["CTRL_ERROR"] == layout.CTRL_ERROR
    assert constants["CTRL_TOTAL_RECV"] == layout.CTRL_TOTAL_RECV
    assert constants["CTRL_NET_HOP_SIGNAL"] == layout.CTRL_NET_HOP_SIGNAL
    assert constants["CTRL_NET_REPLY_SIGNAL"] == layout.CTRL_NET_REPLY_SIGNAL


@pytest.mark.parametrize(
    ("code", "error", "text"),
    [
        (layout.ERR_TIMEOUT, EpTimeoutError, "PE 1: a peer did not answer within MORI_EP_TIMEOUT="),
        (layout.ERR_RECV_OVERFLOW, EpOverflowError, "max_num_tokens_to_recv()=7 (raise max_total_recv_tokens)"),
        (layout.ERR_BAD_EXPERT, EpInputError, "expert id >= 12;"),
        (layout.ERR_SHORT_INPUT, EpInputError, "fewer rows than total_recv"),
        (99, EpTimeoutError, "PE 1: unknown error code 99"),
    ],
)
def test_recorded_error_names_the_code_and_its_limit(code: int, error: type, text: str) -> None:
    """The error word's codes as mori.ep's and mori.jax's check_error raise them (one function)."""
    w = Workload(world_size=3, max_tokens=4, hidden=8, topk=2, experts_per_rank=4, tokens=None)
    raised = layout.recorded_error(code, ep_programs.make_config(w, rank=1), max_recv=7)
    assert type(raised) is error and text in str(raised), repr(raised)
