# SPDX-License-Identifier: MIT
"""Typed views of symmetric memory that numpy and torch consume without copying (DLPack)."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mori.shmem import api
from mori.shmem import arguments as arg
from mori.shmem._native import _C
from mori.shmem.dtypes import DType, resolve
from mori.shmem.errors import InvalidArgumentError, InvalidArgumentTypeError

_KDL_CPU = 1
_KDL_CUDA = 2


def _heap_device() -> tuple[int, int]:
    """The DLPack device of the heap: host memory on the cpu backend, the PE's GPU on the cuda one."""
    if api.shmem_backend() == "cuda":
        return (_KDL_CUDA, _C.cuda_device())
    return (_KDL_CPU, 0)


class _Allocation:
    """Owns one symmetric allocation; freed collectively by ``free`` or leaked until finalize."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.freed = False


class SymmetricBuffer:
    """A contiguous, typed array in the symmetric heap, as seen from this process.

    ``pe`` says whose copy the view addresses: the local one (``shmem_mype()``) or a peer's one
    reached through ``shmem_ptr_p2p``. Exports ``__dlpack__`` so ``np.from_dlpack(buf)`` and
    ``torch.from_dlpack(buf)`` alias the heap memory.
    """

    def __init__(self, allocation: _Allocation, shape: tuple[int, ...], dtype: DType, pe: int, ptr: int) -> None:
        self._allocation = allocation
        self._device = _heap_device()
        self.shape = shape
        self._dtype = dtype
        self.pe = pe
        self.ptr = ptr

    @property
    def dtype(self) -> Any:
        """The numpy dtype, or the type's name where numpy has none ("bfloat16", "float8_e4m3fn")."""
        return self._dtype.numpy if self._dtype.numpy is not None else self._dtype.name

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self._dtype.itemsize

    @property
    def symmetric_ptr(self) -> int:
        """The address of the local copy: what put/get and atomics take as the symmetric address."""
        return self._allocation.ptr

    def _strides(self) -> list[int]:
        strides, step = [], 1
        for extent in reversed(self.shape):
            strides.append(step)
            step *= extent
        return list(reversed(strides))

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        if self._allocation.freed:
            raise InvalidArgumentError(f"buffer at {self.symmetric_ptr:#x} was freed")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise InvalidArgumentError(f"dl_device={dl_device} differs from the buffer's device {self._device}")
        if copy:
            raise InvalidArgumentError("copy=True: a symmetric buffer is exported without copies only")
        versioned = max_version is not None and max_version[0] >= 1
        return _C.make_dlpack(
            self,
            self.ptr,
            list(self.shape),
            self._strides(),
            self._dtype.dlpack_code,
            self._dtype.bits,
            self._device[0],
            self._device[1],
            versioned,
        )

    def numpy(self) -> np.ndarray[Any, Any]:
        """A numpy array over the same memory (no copy)."""
        if self._dtype.numpy is None:
            raise InvalidArgumentError(f"numpy has no {self._dtype.name}; use .torch() instead")
        if self._device[0] != _KDL_CPU:
            raise InvalidArgumentError("this buffer is GPU memory (cuda backend); numpy cannot view it, use .torch()")
        return np.from_dlpack(self)

    def torch(self) -> Any:
        """A torch tensor over the same memory (no copy): a CPU tensor, or a CUDA one on the cuda backend."""
        import torch

        return torch.from_dlpack(self)

    def peer(self, pe: int) -> SymmetricBuffer:
        """The same array in PE ``pe``'s copy of the heap."""
        ptr = api.shmem_ptr_p2p(self.symmetric_ptr, api.shmem_mype(), pe)
        return SymmetricBuffer(self._allocation, self.shape, self._dtype, pe, ptr)

    def free(self) -> None:
        """Collective: returns the allocation to the heap. Views must not be used afterwards."""
        if not self._allocation.freed:
            api.shmem_free(self._allocation.ptr)
            self._allocation.freed = True

    def __enter__(self) -> SymmetricBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        return f"SymmetricBuffer(shape={self.shape}, dtype={self._dtype.name}, pe={self.pe}, ptr={self.ptr:#x})"


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not (hasattr(shape, "__index__") or hasattr(shape, "__iter__")):
        raise InvalidArgumentTypeError(f"shape must be an int or a sequence of ints, got {type(shape).__name__}")
    given: Any = shape  # anything a caller passes, checked here
    extents = [given] if hasattr(given, "__index__") else list(given)
    dims = tuple(arg.size(f"shape[{i}]", d) for i, d in enumerate(extents))
    if math.prod(dims) > arg.U64_MAX:
        raise InvalidArgumentError(f"shape={dims} has more than {arg.U64_MAX} elements")
    return dims


def shmem_empty(shape: int | Sequence[int], dtype: Any = np.float32) -> SymmetricBuffer:
    """Collective: a new symmetric array. Its contents are undefined (memory may be reused)."""
    dims, resolved = _shape(shape), resolve(dtype)
    nbytes = math.prod(dims) * resolved.itemsize
    ptr = api.shmem_malloc(max(nbytes, 1))
    return SymmetricBuffer(_Allocation(ptr, nbytes), dims, resolved, api.shmem_mype(), ptr)


def shmem_zeros(shape: int | Sequence[int], dtype: Any = np.float32) -> SymmetricBuffer:
    """Collective: a new symmetric array filled with zeros on every PE.

    Ends with a barrier, so a peer's put issued right after it can never be zeroed over.
    """
    buffer = shmem_empty(shape, dtype)
    if buffer.nbytes > 0:
        if buffer.__dlpack_device__()[0] == _KDL_CPU:
            ctypes.memset(buffer.ptr, 0, buffer.nbytes)
        else:
            zeros = np.zeros(buffer.nbytes, dtype=np.uint8)
            api.shmem_putmem(buffer.ptr, zeros.ctypes.data, buffer.nbytes, api.shmem_mype())
    api.shmem_barrier_all()
    return buffer


def _address_and_nbytes(obj: Any, argument: str) -> tuple[int, int]:
    """Base address and size of a contiguous array: SymmetricBuffer, numpy array or torch tensor.

    On the cuda backend torch CUDA tensors are accepted too (the driver copies between any two).
    """
    if isinstance(obj, SymmetricBuffer):
        return obj.symmetric_ptr, obj.nbytes
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            raise InvalidArgumentError(f"{argument} must be C-contiguous")
        return int(obj.__array_interface__["data"][0]), int(obj.nbytes)
    if hasattr(obj, "data_ptr") and hasattr(obj, "is_contiguous"):
        if obj.device.type != "cpu" and api.shmem_backend() != "cuda":
            raise InvalidArgumentError(f"{argument} is on {obj.device}; the cpu backend moves host memory")
        if not obj.is_contiguous():
            raise InvalidArgumentError(f"{argument} must be contiguous")
        return int(obj.data_ptr()), int(obj.numel() * obj.element_size())
    raise InvalidArgumentTypeError(
        f"{argument} must be a SymmetricBuffer, numpy array or torch tensor, got {type(obj).__name__}"
    )


def shmem_put(dest: Any, src: Any, pe: int) -> None:
    """Copies array ``src`` into PE ``pe``'s copy of the symmetric array ``dest`` (same byte size)."""
    _copy_whole(dest, src, pe, "src", api.shmem_putmem)


def shmem_get(dest: Any, src: Any, pe: int) -> None:
    """Copies PE ``pe``'s copy of the symmetric array ``src`` into local array ``dest``."""
    _copy_whole(dest, src, pe, "dest", api.shmem_getmem)


def _copy_whole(dest: Any, src: Any, pe: int, local: str, copy: Callable[[int, int, int, int], Any]) -> None:
    """``copy(dest address, src address, bytes, pe)`` of the whole ``local`` array ("src" for a put,
    "dest" for a get), after checking every argument and that it fits the other one."""
    pe = arg.c_int("pe", pe)
    sides = {"dest": _address_and_nbytes(dest, "dest"), "src": _address_and_nbytes(src, "src")}
    other = "dest" if local == "src" else "src"
    if sides[local][1] > sides[other][1]:
        raise InvalidArgumentError(f"{local} holds {sides[local][1]} bytes, more than {other}'s {sides[other][1]}")
    copy(sides["dest"][0], sides["src"][0], sides[local][1], pe)
