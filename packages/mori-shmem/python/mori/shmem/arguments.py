# SPDX-License-Identifier: MIT
"""Checks of the public API's arguments, made before anything reaches the native library.

A wrong type raises InvalidArgumentTypeError (also a TypeError), a value outside what the C ABI
can carry raises InvalidArgumentError (also a ValueError); both name the argument, the value and
the limit, where pybind11 would raise a bare TypeError that names neither.
"""

from __future__ import annotations

import operator
from typing import Any

from mori.shmem.errors import InvalidArgumentError, InvalidArgumentTypeError

U64_MAX = (1 << 64) - 1
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT_MAX = (1 << 32) - 1


def integer(name: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int in [low, high]; integer-like objects (numpy integers) are accepted."""
    if isinstance(value, bool):
        raise InvalidArgumentTypeError(f"{name} must be an integer, got bool {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentTypeError(
            f"{name} must be an integer in [{low}, {high}], got {type(value).__name__} {value!r}"
        ) from None
    if not low <= number <= high:
        raise InvalidArgumentError(f"{name}={number} is outside [{low}, {high}]")
    return number


def address(name: str, value: Any) -> int:
    """A pointer as an integer (0 allowed; whether it is valid is the native library's check)."""
    return integer(name, value, 0, U64_MAX)


def size(name: str, value: Any) -> int:
    """A byte count (size_t)."""
    return integer(name, value, 0, U64_MAX)


def c_int(name: str, value: Any) -> int:
    """A PE number, rank or code carried as a C int; the native library checks its meaning."""
    return integer(name, value, INT_MIN, INT_MAX)


def real(name: str, value: Any, low: float, high: float) -> float:
    """A number of seconds and the like: int or float in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentTypeError(f"{name} must be a number in [{low}, {high}], got {type(value).__name__}")
    if not low <= value <= high:  # also refuses NaN
        raise InvalidArgumentError(f"{name}={value} is outside [{low}, {high}]")
    return float(value)


def data_bytes(name: str, value: Any) -> bytes:
    """bytes, bytearray or any contiguous buffer, as bytes."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise InvalidArgumentTypeError(f"{name} must be bytes, got {type(value).__name__}")


def text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    return value
