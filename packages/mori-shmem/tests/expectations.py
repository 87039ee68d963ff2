# SPDX-License-Identifier: MIT
"""Assertions on the error records that pe_programs return for calls expected to fail."""

from __future__ import annotations


def assert_error(err: dict | None, *type_names: str) -> None:
    assert err is not None, f"expected one of {type_names}, but the call succeeded"
    assert err["type"] in type_names, f"expected one of {type_names}, got {err['type']}: {err['message']}"
    assert "MoriShmemError" in err["mro"], err
