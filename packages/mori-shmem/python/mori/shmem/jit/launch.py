# SPDX-License-Identifier: MIT
"""Checking and packing a kernel launch: grid, block, shared memory, stream and arguments.

Everything here is pure Python and runs before the driver is touched, so bad input raises
``InvalidArgumentError`` (naming the argument, the value and the limit) and nothing launches.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.shmem.errors import InvalidArgumentError

# Limits shared by every NVIDIA GPU since compute capability 3.0 (CUDA programming guide,
# "Technical Specifications per Compute Capability"), so they are checked without a GPU.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)
MAX_THREADS_PER_BLOCK = 1024
# Dynamic shared memory above this needs cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES).
DEFAULT_SHARED_MEMORY_LIMIT = 48 * 1024

Dim3 = int | Sequence[int]


def _dim3(argument: str, value: Any, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    # A launch is on the hot path (a few microseconds of Python per kernel matter), so the common
    # shapes, a plain int or a tuple of plain ints in range, are checked without generic code.
    if type(value) is int:
        if 1 <= value <= limits[0]:
            return (value, 1, 1)
        dims: tuple[Any, ...] = (value,)
    elif type(value) is tuple and 1 <= len(value) <= 3:
        dims = value
    else:
        try:
            dims = tuple(value)
        except TypeError:
            raise InvalidArgumentError(f"{argument}={value!r} must be an int or a tuple of 1 to 3 ints") from None
    if not 1 <= len(dims) <= 3 or any(type(d) is not int for d in dims):
        raise InvalidArgumentError(f"{argument}={value!r} must be an int or a tuple of 1 to 3 ints")
    padded = (*dims, 1, 1)[:3]
    x, y, z = padded
    if 1 <= x <= limits[0] and 1 <= y <= limits[1] and 1 <= z <= limits[2]:
        return (x, y, z)
    for axis, (extent, limit) in enumerate(zip(padded, limits, strict=True)):
        if not 1 <= extent <= limit:
            raise InvalidArgumentError(
                f"{argument}={value!r}: extent {extent} along {'xyz'[axis]} is outside [1, {limit}]"
            )
    raise AssertionError("unreachable")


def grid_dims(grid: Dim3) -> tuple[int, int, int]:
    """``grid`` as (x, y, z), checked against the hardware limits."""
    return _dim3("grid", grid, MAX_GRID)


def block_dims(block: Dim3) -> tuple[int, int, int]:
    """``block`` as (x, y, z), checked against the per-axis limits and 1024 threads in all."""
    dims = _dim3("block", block, MAX_BLOCK)
    threads = dims[0] * dims[1] * dims[2]
    if threads > MAX_THREADS_PER_BLOCK:
        raise InvalidArgumentError(
            f"block={block!r} has {threads} threads; the limit is {MAX_THREADS_PER_BLOCK} per block"
        )
    return dims


def stream_handle(stream: Any) -> int:
    """The CUstream of ``stream``: None (the legacy default stream, 0), an int handle, an object
    with ``.cuda_stream`` (``torch.cuda.Stream``) or one with ``__cuda_stream__`` (cuda.core)."""
    if stream is None:
        return 0
    if type(stream) is int:
        handle = stream
    elif hasattr(stream, "cuda_stream"):
        handle = stream.cuda_stream
    elif hasattr(stream, "__cuda_stream__"):
        handle = stream.__cuda_stream__()[1]
    else:
        raise InvalidArgumentError(
            f"stream={stream!r} is not a stream: expected None, an int handle, or an object with "
            "a .cuda_stream attribute (torch.cuda.Stream)"
        )
    if not isinstance(handle, int) or not 0 <= handle < 2**64:
        raise InvalidArgumentError(f"stream handle {handle!r} is not a pointer-sized unsigned int")
    return handle


def _pointer_of(index: int, value: Any) -> int:
    if hasattr(value, "data_ptr") and callable(value.data_ptr):
        # A pageable CPU tensor's address would fault on the GPU and poison the context; pinned
        # host memory is mapped for the device (UVA), so it stays allowed.
        if getattr(value, "is_cuda", True) is False and not (hasattr(value, "is_pinned") and value.is_pinned()):
            raise InvalidArgumentError(
                f"args[{index}] is a tensor in pageable host memory (device {getattr(value, 'device', '?')}); "
                "kernels need CUDA (or pinned host) memory"
            )
        return int(value.data_ptr())
    interface = value.__cuda_array_interface__
    return int(interface["data"][0])


_BY_VALUE = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union)


def _as_ctype(index: int, value: Any) -> ctypes._CData:
    """The by-value storage of one kernel argument."""
    if isinstance(value, _BY_VALUE):
        return value
    if type(value) is int:  # the common case first; bool and numpy ints fall through
        if 0 <= value < 2**64:
            return ctypes.c_uint64(value)
        if -(2**63) <= value < 0:
            return ctypes.c_int64(value)
    if isinstance(value, np.generic):
        # A numpy scalar knows its width, so its bytes are passed as they are (np.float32 -> float).
        # Checked before int and float: np.float64 is a subclass of float.
        data = value.tobytes()
        return (ctypes.c_char * len(data)).from_buffer_copy(data)
    if isinstance(value, bool):
        raise InvalidArgumentError(f"args[{index}]={value!r}: bool is ambiguous; pass ctypes.c_bool or ctypes.c_int32")
    if isinstance(value, int):
        if -(2**63) <= value < 0:
            return ctypes.c_int64(value)
        if 0 <= value < 2**64:
            return ctypes.c_uint64(value)
        raise InvalidArgumentError(f"args[{index}]={value} does not fit in 64 bits")
    if isinstance(value, float):
        raise InvalidArgumentError(
            f"args[{index}]={value!r}: a Python float is ambiguous; pass ctypes.c_float or ctypes.c_double"
        )
    if hasattr(value, "data_ptr") or hasattr(value, "__cuda_array_interface__"):
        return ctypes.c_uint64(_pointer_of(index, value))
    raise InvalidArgumentError(
        f"args[{index}] has type {type(value).__name__}, which cannot be a kernel argument: pass a ctypes "
        "scalar or Structure, an int (64-bit), a numpy scalar, or a tensor / __cuda_array_interface__ object"
    )


@dataclass(slots=True)
class LaunchConfig:
    """A checked launch: what cuLaunchKernel takes, plus the storage its pointers point into."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: int
    params: ctypes.Array[ctypes.c_void_p]
    storage: tuple[ctypes._CData, ...]  # kept alive until the launch returns


def pack_args(args: Sequence[Any]) -> tuple[ctypes.Array[ctypes.c_void_p], tuple[ctypes._CData, ...]]:
    """The ``void* kernelParams[]`` of ``args`` and the objects its entries point into.

    A Python int is passed as 64 bits, which is right for pointers, size_t and int64 parameters;
    an ``int`` (32-bit) parameter needs ``ctypes.c_int32``.
    """
    # list and tuple skip the slower abstract Sequence check.
    if (
        type(args) is not list
        and type(args) is not tuple
        and (isinstance(args, (str, bytes)) or not isinstance(args, Sequence))
    ):
        raise InvalidArgumentError(f"args must be a sequence of kernel arguments, not {type(args).__name__}")
    storage = tuple([_as_ctype(index, value) for index, value in enumerate(args)])
    params = (ctypes.c_void_p * (len(storage) or 1))(*[ctypes.addressof(item) for item in storage])
    return params, storage


def prepare_launch(
    grid: Dim3, block: Dim3, args: Sequence[Any], *, shared_mem: int = 0, stream: Any = None
) -> LaunchConfig:
    """Checks every part of a launch and packs its arguments; raises ``InvalidArgumentError``."""
    grid3, block3 = grid_dims(grid), block_dims(block)
    if type(shared_mem) is not int or shared_mem < 0:
        raise InvalidArgumentError(f"shared_mem={shared_mem!r} must be a non-negative int (bytes)")
    handle = stream_handle(stream)
    params, storage = pack_args(args)
    return LaunchConfig(grid3, block3, shared_mem, handle, params, storage)
