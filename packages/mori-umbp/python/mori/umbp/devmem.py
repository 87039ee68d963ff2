# SPDX-License-Identifier: MIT
"""Addresses that may be GPU memory, and copies between them.

mori.umbp's data methods take raw addresses, which are host memory unless the caller says
otherwise: a CUDA tensor, or memory registered with a device id. ``device`` is -1 for host
memory, else the CUDA ordinal. Copies that touch a GPU go through torch views of the addresses
(torch is imported only then, so host-only nodes and CI need no torch); host-to-host copies stay
``ctypes.memmove``.
"""

from __future__ import annotations

import ctypes
import importlib
from typing import Any

from mori.umbp.errors import InvalidArgumentError, TierUnavailableError

HOST = -1


def _torch() -> tuple[Any, str]:
    """(torch, '') or (None, why it cannot be used for CUDA)."""
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch.cuda.is_available() is False (no CUDA driver or GPU)"
    return torch, ""


def gpu_unavailable_reason() -> str:
    """'' when torch can use a CUDA GPU here, else why not."""
    return _torch()[1]


def require_cuda(name: str, value: object, device_id: int) -> Any:
    """torch, once CUDA device ``device_id`` is usable; else TierUnavailableError naming the
    argument ``name=value`` that asked for the GPU and why it cannot be had."""
    torch, why = _torch()
    if torch is None:
        raise TierUnavailableError(f"{name}={value!r} needs a CUDA GPU: {why}")
    count = int(torch.cuda.device_count())
    if not 0 <= device_id < count:
        raise TierUnavailableError(
            f"{name}={value!r} asks for CUDA device {device_id}, but {count} device(s) are visible "
            f"(ordinals 0..{count - 1})"
        )
    return torch


class _CudaSpan:
    """A byte range of device memory in the CUDA array interface, so torch can view it."""

    def __init__(self, ptr: int, size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (size,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


def view(torch: Any, ptr: int, size: int, device: int) -> Any:
    """A uint8 tensor over [ptr, ptr+size) (no copy): host memory or CUDA device ``device``."""
    if device == HOST:
        return torch.frombuffer((ctypes.c_uint8 * size).from_address(ptr), dtype=torch.uint8)
    return torch.as_tensor(_CudaSpan(ptr, size), device=f"cuda:{device}")


def copy(dst: int, dst_device: int, src: int, src_device: int, size: int) -> None:
    """Copies ``size`` bytes; returns once they landed (GPU copies are synchronised)."""
    if dst_device == HOST and src_device == HOST:
        ctypes.memmove(dst, src, size)
        return
    torch = require_cuda("device", max(dst_device, src_device), max(dst_device, src_device))
    view(torch, dst, size, dst_device).copy_(view(torch, src, size, src_device))
    for device in {dst_device, src_device} - {HOST}:
        torch.cuda.synchronize(device)


def tensor_span(tensor: Any, name: str = "tensor") -> tuple[int, int, int]:
    """(address, bytes, device) of a contiguous torch tensor (duck-typed: torch is not imported)."""
    if not callable(getattr(tensor, "is_contiguous", None)) or not hasattr(tensor, "data_ptr"):
        raise InvalidArgumentError(f"{name} of type {type(tensor).__name__} is not a torch.Tensor")
    if not tensor.is_contiguous():
        raise InvalidArgumentError(f"{name} must be contiguous (call .contiguous() first)")
    device = tensor.device
    if device.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"{name}.device={device} is neither cpu nor cuda")
    index = HOST if device.type == "cpu" else (device.index if device.index is not None else 0)
    return int(tensor.data_ptr()), int(tensor.nelement() * tensor.element_size()), index
