# SPDX-License-Identifier: MIT
"""Wrong Python types and out-of-range values at the public entry points of mori.shmem raise the
package's typed errors, naming the argument, the value and the limit, before anything reaches the
native library (so no init is needed to see them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import mori.shmem as shmem

U64 = 1 << 64
UID = bytes(128)

# (call, argument named in the message): a str where an integer belongs.
WRONG_TYPE: list[tuple[Callable[[], Any], str]] = [
    (lambda: shmem.shmem_malloc("10"), "size"),
    (lambda: shmem.shmem_malloc(1.5), "size"),
    (lambda: shmem.shmem_malloc_align("256", 64), "alignment"),
    (lambda: shmem.shmem_ext_malloc_with_flags(64, "fine"), "flags"),
    (lambda: shmem.shmem_free("0x1000"), "ptr"),
    (lambda: shmem.shmem_free(None), "ptr"),
    (lambda: shmem.shmem_buffer_register(4096, "8"), "size"),
    (lambda: shmem.shmem_buffer_deregister("p", 8), "ptr"),
    (lambda: shmem.shmem_ptr_p2p(4096, 0, "1"), "dest_pe"),
    (lambda: shmem.shmem_pe_transport("1"), "pe"),
    (lambda: shmem.shmem_putmem(4096, 8192, "8", 0), "nbytes"),
    (lambda: shmem.shmem_getmem(4096, [8192], 8, 0), "src"),
    (lambda: shmem.shmem_putmem_signal(4096, 8192, 8, "sig", 1, 9, 0), "sig_addr"),
    (lambda: shmem.shmem_signal_op(4096, 1, 9, "0"), "pe"),
    (lambda: shmem.shmem_signal_op(4096, 1, "9", 0), "sig_op"),
    (lambda: shmem.shmem_signal_fetch("4096"), "sig_addr"),
    (lambda: shmem.shmem_atomic_add(4096, "1", 0), "value"),
    (lambda: shmem.shmem_atomic_fetch(4096, 0.0), "pe"),
    (lambda: shmem.shmem_atomic_compare_swap(4096, "0", 1, 0), "compare"),
    (lambda: shmem.shmem_wait_until(4096, shmem.CmpOp.EQ, 1, timeout="5"), "timeout"),
    (lambda: shmem.shmem_test(b"x", shmem.CmpOp.EQ, 1), "ivar"),
    (lambda: shmem.shmem_test(4096, "EQ", 1), "cmp"),
    (lambda: shmem.shmem_atomic(4096, "ADD", 1, 0), "op"),
    (lambda: shmem.shmem_bootstrap_allgather("text"), "data"),
    (lambda: shmem.shmem_bootstrap_broadcast(b"x", "0"), "root"),
    (lambda: shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, "0", 1, UID), "rank"),
    (lambda: shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, 0, 1, "uid"), "unique_id"),
    (lambda: shmem.parse_size(4096), "text"),
    (lambda: shmem.shmem_zeros("10"), "shape"),
    (lambda: shmem.shmem_empty((4, "4")), "shape[1]"),
    (lambda: shmem.shmem_put(np.zeros(4), np.zeros(4), "1"), "pe"),
    (lambda: shmem.shmem_get(np.zeros(4), "src", 0), "src"),
]

# (call, argument, the limit quoted in the message): values the C ABI cannot carry.
OUT_OF_RANGE: list[tuple[Callable[[], Any], str, str]] = [
    (lambda: shmem.shmem_malloc(U64), "size", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_malloc(-1), "size", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_free(-1), "ptr", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_free(U64), "ptr", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_ext_malloc_with_flags(64, 1 << 32), "flags", f"[0, {(1 << 32) - 1}]"),
    (lambda: shmem.shmem_putmem(4096, 8192, 8, 1 << 31), "pe", f"[{-(1 << 31)}, {(1 << 31) - 1}]"),
    (lambda: shmem.shmem_getmem(4096, 8192, -8, 0), "nbytes", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_atomic_add(4096, U64, 0), "value", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_wait_until(4096, shmem.CmpOp.EQ, 1, timeout=-1), "timeout", "[0.0,"),
    (lambda: shmem.shmem_wait_until(4096, shmem.CmpOp.EQ, 1, timeout=float("nan")), "timeout", "[0.0,"),
    (lambda: shmem.shmem_zeros((2, -3)), "shape[1]", f"[0, {U64 - 1}]"),
    (lambda: shmem.shmem_empty((1 << 40, 1 << 40)), "shape", "elements"),
]


@pytest.mark.parametrize(("call", "argument"), WRONG_TYPE)
def test_wrong_type_is_a_typed_error(call: Callable[[], Any], argument: str) -> None:
    with pytest.raises(shmem.InvalidArgumentTypeError) as raised:
        call()
    # Both the package's root and the builtin a Python caller would catch.
    assert isinstance(raised.value, shmem.MoriShmemError) and isinstance(raised.value, TypeError)
    assert isinstance(raised.value, shmem.InvalidArgumentError)
    assert argument in str(raised.value), str(raised.value)


@pytest.mark.parametrize(("call", "argument", "limit"), OUT_OF_RANGE)
def test_out_of_range_is_a_typed_error(call: Callable[[], Any], argument: str, limit: str) -> None:
    with pytest.raises(shmem.InvalidArgumentError) as raised:
        call()
    assert not isinstance(raised.value, TypeError)
    message = str(raised.value)
    assert f"{argument}=" in message and limit in message, message


def test_integer_like_values_are_accepted() -> None:
    """numpy integers pass the checks (and then reach the library, which wants an initialized PE)."""
    with pytest.raises(shmem.NotInitializedError):
        shmem.shmem_malloc(np.uint64(64))
    with pytest.raises(shmem.NotInitializedError):
        shmem.shmem_free(np.int64(0) + 4096)
