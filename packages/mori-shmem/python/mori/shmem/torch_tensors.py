# SPDX-License-Identifier: MIT
"""MORI's torch helpers: torch tensors that live in the symmetric heap."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mori.shmem import api
from mori.shmem import arguments as arg
from mori.shmem.buffer import SymmetricBuffer, shmem_empty
from mori.shmem.errors import InvalidArgumentError


def mori_shmem_create_tensor(shape: Sequence[int], dtype: Any) -> Any:
    """Collective: a torch tensor over new symmetric memory (marked ``__symm_tensor__``)."""
    buffer = shmem_empty(tuple(shape), dtype)
    tensor = buffer.torch()
    tensor.__symm_tensor__ = True
    tensor.__symm_buffer__ = buffer
    return tensor


def _buffer_of(tensor: Any) -> SymmetricBuffer:
    buffer = getattr(tensor, "__symm_buffer__", None)
    if not isinstance(buffer, SymmetricBuffer):
        raise InvalidArgumentError("tensor was not made by mori_shmem_create_tensor")
    return buffer


def symm_mori_shmem_tensor(tensor: Any, peer: int) -> Any:
    """PE ``peer``'s copy of a symmetric tensor, as a tensor this process can read and write."""
    return _buffer_of(tensor).peer(peer).torch()


def mori_shmem_free_tensor(tensor: Any) -> None:
    """Collective: frees a tensor made by ``mori_shmem_create_tensor``."""
    _buffer_of(tensor).free()


def mori_shmem_create_tensor_list_intra_node(shape: Sequence[int], dtype: Any, num_ranks: int) -> list[Any]:
    """Collective: one new symmetric tensor, viewed as every PE's copy (index = PE)."""
    num_ranks = arg.c_int("num_ranks", num_ranks)
    if not 0 <= num_ranks <= api.shmem_npes():
        raise InvalidArgumentError(f"num_ranks={num_ranks} is outside [0, npes={api.shmem_npes()}]")
    tensor = mori_shmem_create_tensor(shape, dtype)
    mine = api.shmem_mype()
    return [tensor if pe == mine else symm_mori_shmem_tensor(tensor, pe) for pe in range(num_ranks)]
