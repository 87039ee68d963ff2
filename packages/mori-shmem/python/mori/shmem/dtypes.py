# SPDX-License-Identifier: MIT
"""Element types that symmetric buffers and atomics understand, with their DLPack codes."""

from __future__ import annotations

import contextlib
import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.shmem.errors import InvalidArgumentError, InvalidArgumentTypeError

# DLDataTypeCode values of the DLPack ABI.
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL, _DL_FLOAT8_E4M3FN = 0, 1, 2, 4, 6, 10


@dataclass(frozen=True)
class DType:
    """One element type: its canonical name, size and DLPack encoding."""

    name: str
    itemsize: int
    dlpack_code: int
    numpy: np.dtype[Any] | None  # None where numpy has no such type (bfloat16, fp8)

    @property
    def bits(self) -> int:
        return self.itemsize * 8


def _numpy_type(name: str, code: int) -> DType:
    dtype = np.dtype(name)
    return DType(name, dtype.itemsize, code, dtype)


DTYPES: dict[str, DType] = {
    dtype.name: dtype
    for dtype in (
        *(_numpy_type(f"int{bits}", _DL_INT) for bits in (8, 16, 32, 64)),
        *(_numpy_type(f"uint{bits}", _DL_UINT) for bits in (8, 16, 32, 64)),
        *(_numpy_type(f"float{bits}", _DL_FLOAT) for bits in (16, 32, 64)),
        DType("bool", 1, _DL_BOOL, np.dtype(np.bool_)),
        DType("bfloat16", 2, _DL_BFLOAT, None),
        DType("float8_e4m3fn", 1, _DL_FLOAT8_E4M3FN, None),
    )
}


def resolve(dtype: Any) -> DType:
    """Accepts a name ("float32", "bfloat16"), a numpy dtype or type, or a torch dtype."""
    name = str(dtype).removeprefix("torch.") if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        with contextlib.suppress(TypeError):
            name = np.dtype(dtype).name
    if name not in DTYPES:
        raise InvalidArgumentError(f"dtype={dtype!r} is not supported; supported: {', '.join(DTYPES)}")
    return DTYPES[name]


# Integer types of atomics and waits: mori_shmem_int_type_t codes.
_INT_TYPE_CODES = {"int32": 0, "uint32": 1, "int64": 2, "uint64": 3}


def int_type_code(dtype: Any) -> tuple[int, DType]:
    """The C ABI type code of an atomic/wait integer type, with its DType."""
    resolved = resolve(dtype)
    if resolved.name not in _INT_TYPE_CODES:
        raise InvalidArgumentError(
            f"dtype={dtype!r} is not an atomic integer type; use one of {', '.join(_INT_TYPE_CODES)}"
        )
    return _INT_TYPE_CODES[resolved.name], resolved


def to_bits(value: int, dtype: DType, argument: str) -> int:
    """The two's-complement bit pattern of value as a uint64, after checking it fits dtype."""
    signed = dtype.name.startswith("int")
    lo, hi = (-(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1) if signed else (0, (1 << dtype.bits) - 1)
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise InvalidArgumentTypeError(f"{argument} must be an integer of {dtype.name} [{lo}, {hi}], got {value!r}")
    value = operator.index(value)
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{argument}={value} does not fit {dtype.name} [{lo}, {hi}]")
    return value & ((1 << 64) - 1)


def from_bits(bits: int, dtype: DType) -> int:
    """The value of dtype whose bit pattern (sign-extended to 64 bits by the library) is bits."""
    bits &= (1 << dtype.bits) - 1
    if dtype.name.startswith("int") and bits >= 1 << (dtype.bits - 1):
        bits -= 1 << dtype.bits
    return bits
