# SPDX-License-Identifier: MIT
"""Where a v2 op's symmetric memory comes from: mori.shmem's heap, or a mori.cco communicator.

Both give the same thing: an allocation at the same offset on every PE, this PE's copy and each
peer's copy as byte tensors it can load and store, and a host barrier over the PEs. The v1
protocol and the scatter combine only need that, so they run unchanged over either.
"""

from __future__ import annotations

import abc
from typing import Any

from mori.ep.v2.errors import EpCommunicatorError


class Block:
    """One symmetric allocation of ``nbytes`` bytes."""

    def __init__(self, memory: SymmetricMemory, ptr: int, nbytes: int, handle: Any) -> None:
        self.memory, self.ptr, self.nbytes, self._handle = memory, ptr, nbytes, handle
        self._freed = False

    def local(self) -> Any:
        """This PE's copy, a uint8 tensor on the memory's device."""
        return self.memory.tensor(self, self.memory.rank)

    def peer_ptr(self, pe: int) -> int:
        return self.memory.peer_ptr(self, pe)

    def peer(self, pe: int) -> Any:
        """PE ``pe``'s copy, as a uint8 tensor this PE loads and stores."""
        return self.memory.tensor(self, pe)

    def free(self) -> None:
        """Collective; a second call does nothing."""
        if not self._freed:
            self._freed = True
            self.memory.free(self)


class SymmetricMemory(abc.ABC):
    """The interface both sources implement."""

    backend: str  # "cpu" or "cuda"
    cuda_device: int  # -1 on the cpu backend
    rank: int
    world_size: int

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", self.cuda_device) if self.backend == "cuda" else torch.device("cpu")

    @abc.abstractmethod
    def allocate(self, nbytes: int) -> Block: ...

    @abc.abstractmethod
    def peer_ptr(self, block: Block, pe: int) -> int: ...

    @abc.abstractmethod
    def free(self, block: Block) -> None: ...

    @abc.abstractmethod
    def barrier(self) -> None: ...

    @abc.abstractmethod
    def tensor(self, block: Block, pe: int) -> Any: ...


class ShmemMemory(SymmetricMemory):
    """mori.shmem's heap (initialised by the caller)."""

    def __init__(self) -> None:
        import mori.shmem as shmem

        self._shmem = shmem
        self.backend = shmem.shmem_backend()
        self.cuda_device = shmem.shmem_cuda_device() if self.backend == "cuda" else -1
        self.rank, self.world_size = shmem.shmem_mype(), shmem.shmem_npes()

    def allocate(self, nbytes: int) -> Block:
        buffer = self._shmem.shmem_empty(nbytes, "uint8")  # collective
        return Block(self, buffer.ptr, nbytes, buffer)

    def peer_ptr(self, block: Block, pe: int) -> int:
        return int(block._handle.peer(pe).ptr)

    def free(self, block: Block) -> None:
        block._handle.free()

    def barrier(self) -> None:
        self._shmem.shmem_barrier_all()

    def tensor(self, block: Block, pe: int) -> Any:
        buffer = block._handle if pe == self.rank else block._handle.peer(pe)
        return buffer.torch()


def import_cco() -> Any:
    """mori.cco, or EpCommunicatorError naming the distribution to install."""
    try:
        import mori.cco as cco
    except ImportError as exc:
        raise EpCommunicatorError(
            f"comm= is a communicator, which needs mori-cco (pip install mori-cco); it cannot be imported: {exc}"
        ) from None
    return cco


class CcoMemory(SymmetricMemory):
    """The symmetric memory of a mori.cco communicator whose ranks are the op's PEs, all of one
    node (v2 is intranode, as in MORI: every PE loads and stores every other's slot)."""

    def __init__(self, comm: Any, rank: int, world_size: int) -> None:
        cco = import_cco()
        if not isinstance(comm, cco.Communicator):
            raise EpCommunicatorError(
                f"comm must be a mori.cco.Communicator (or None to use mori.shmem), got "
                f"{type(comm).__module__}.{type(comm).__name__}"
            )
        if not comm.is_valid:
            raise EpCommunicatorError("comm was destroyed; create the op with a live communicator")
        if comm.nranks != world_size or comm.rank != rank:
            raise EpCommunicatorError(
                f"config says rank {rank} of world_size={world_size}, but comm is rank {comm.rank} of {comm.nranks}"
            )
        if comm.lsa_size != comm.nranks:
            raise EpCommunicatorError(
                f"comm spans {comm.num_nodes} nodes (lsa_size={comm.lsa_size} of {comm.nranks} ranks); EP v2 is "
                "intranode: every rank must be load/store reachable"
            )
        from mori.cco.tensors import tensor_at

        self._comm, self._tensor_at = comm, tensor_at
        self.backend = str(comm.backend)
        self.cuda_device = int(comm.device) if self.backend == "cuda" else -1
        self.rank, self.world_size = rank, world_size

    def allocate(self, nbytes: int) -> Block:
        mem = self._comm.alloc_mem(nbytes)  # collective, 256-byte aligned
        return Block(self, int(mem.ptr), nbytes, mem)

    def peer_ptr(self, block: Block, pe: int) -> int:
        return int(self._comm.get_peer_ptr(block.ptr, pe))

    def free(self, block: Block) -> None:
        if self._comm.is_valid:  # destroying the communicator already freed it
            self._comm.free_mem(block._handle)

    def barrier(self) -> None:
        self._comm.barrier()

    def tensor(self, block: Block, pe: int) -> Any:
        import torch

        address = block.ptr if pe == self.rank else self.peer_ptr(block, pe)
        return self._tensor_at(address, (block.nbytes,), torch.uint8, self.cuda_device)
