# SPDX-License-Identifier: MIT
"""Initialization over an existing communicator: torch.distributed process groups and mpi4py.

Both reduce to the unique-id path: rank 0 of the group makes the id, the group broadcasts it,
and every member joins with its group rank.
"""

from __future__ import annotations

import logging
from typing import Any

from mori.shmem import api
from mori.shmem.errors import InvalidArgumentError, NotInitializedError, UnsupportedError

logger = logging.getLogger("mori.shmem")


def _resolve_torch_group(group_name: str) -> Any:
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise NotInitializedError(
            "shmem_torch_process_group_init: torch.distributed is not initialized; call "
            "torch.distributed.init_process_group first"
        )
    if group_name in ("default", "WORLD", ""):
        return dist.group.WORLD
    from torch.distributed import distributed_c10d

    try:
        return distributed_c10d._resolve_process_group(group_name)
    except Exception as error:  # torch raises different types across versions
        raise InvalidArgumentError(
            f"group_name={group_name!r} is not a registered process group (register it with "
            f"torch._C._distributed_c10d._register_process_group, or use 'default')"
        ) from error


def shmem_torch_process_group_init(group_name: str) -> int:
    """Collective over the torch process group ``group_name`` ("default" = WORLD)."""
    import torch.distributed as dist

    group = _resolve_torch_group(group_name)
    rank, nranks = dist.get_rank(group), dist.get_world_size(group)
    payload = [api.shmem_get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(payload, src=dist.get_global_rank(group, 0), group=group)
    logger.debug("torch group %r: rank %d of %d joins", group_name, rank, nranks)
    return api.shmem_init_attr(api.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, payload[0])


def init_with_mpi_comm(comm: Any, rank: int, nranks: int) -> int:
    """Collective over an mpi4py communicator (None: COMM_WORLD)."""
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise UnsupportedError("MORI_SHMEM_INIT_WITH_MPI_COMM needs mpi4py: pip install mori-shmem[mpi]") from error
    comm = MPI.COMM_WORLD if comm is None else comm
    comm_rank, comm_size = comm.Get_rank(), comm.Get_size()
    if rank not in (-1, comm_rank):
        raise InvalidArgumentError(f"rank={rank} differs from the communicator's rank {comm_rank}")
    if nranks not in (-1, comm_size):
        raise InvalidArgumentError(f"nranks={nranks} differs from the communicator's size {comm_size}")
    uid = comm.bcast(api.shmem_get_unique_id() if comm_rank == 0 else None, root=0)
    return api.shmem_init_attr(api.MORI_SHMEM_INIT_WITH_UNIQUEID, comm_rank, comm_size, uid)


def shmem_mpi_init() -> int:
    """Collective over MPI.COMM_WORLD."""
    return init_with_mpi_comm(None, -1, -1)
