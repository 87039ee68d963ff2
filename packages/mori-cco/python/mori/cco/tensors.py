# SPDX-License-Identifier: MIT
"""Torch tensors over raw addresses of a communicator's flat range (own slot or a peer's)."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

_TYPESTR = {
    "float32": "<f4",
    "float16": "<f2",
    "bfloat16": "<V2",  # no array-interface code: exported as raw 2-byte words, viewed as bf16
    "int32": "<i4",
    "int64": "<i8",
    "uint8": "|u1",
    "int8": "|i1",
    "float8_e4m3fn": "|u1",
}


def dtype_name(dtype: Any) -> str:
    """'float32' for torch.float32 (and for the string itself)."""
    return str(dtype).removeprefix("torch.")


class _CudaView:
    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "data": (address, False),
            "shape": (nbytes,),
            "typestr": "|u1",
            "version": 3,
            "strides": None,
        }


def tensor_at(address: int, shape: Sequence[int], dtype: Any, device: int) -> Any:
    """A tensor of ``shape`` and ``dtype`` aliasing the memory at ``address`` (device -1: host)."""
    import torch

    name = dtype_name(dtype)
    if name not in _TYPESTR:
        raise TypeError(f"dtype={dtype} is not one of {sorted(_TYPESTR)}")
    torch_dtype = getattr(torch, name)
    nbytes = math.prod(shape) * torch.empty((), dtype=torch_dtype).element_size()
    if device < 0:
        raw = torch.frombuffer((ctypes.c_uint8 * max(nbytes, 1)).from_address(address), dtype=torch.uint8)[:nbytes]
    else:
        raw = torch.as_tensor(_CudaView(address, nbytes), device=f"cuda:{device}")
    return raw.view(torch_dtype).view(tuple(shape))
