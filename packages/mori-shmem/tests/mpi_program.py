# SPDX-License-Identifier: MIT
"""Run under mpiexec by test_init.py: init over MPI three ways, checking against mpi4py.

Prints "OK <rank>" on success; exits non-zero with a message on the first failed check.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import mori.shmem as shmem


def fail(message: str) -> None:
    print(f"FAIL rank {MPI.COMM_WORLD.Get_rank()}: {message}", file=sys.stderr, flush=True)
    MPI.COMM_WORLD.Abort(3)


def check_round(label: str, comm: MPI.Comm) -> None:
    if not shmem.shmem_is_initialized():
        fail(f"{label}: not initialized")
    if shmem.shmem_mype() != comm.Get_rank() or shmem.shmem_npes() != comm.Get_size():
        fail(f"{label}: mype/npes {shmem.shmem_mype()}/{shmem.shmem_npes()} != {comm.Get_rank()}/{comm.Get_size()}")
    p = shmem.shmem_malloc(256)
    cell = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint64 * 1).from_address(p))
    cell[0] = 0
    shmem.shmem_barrier_all()
    shmem.shmem_atomic_add(p, comm.Get_rank() + 1, 0)
    shmem.shmem_barrier_all()
    total = shmem.shmem_atomic_fetch(p, 0)
    n = comm.Get_size()
    if total != n * (n + 1) // 2:
        fail(f"{label}: sum of ranks+1 = {total}")
    # The heap offsets agree with what MPI sees.
    offsets = comm.allgather(p - shmem.shmem_heap_info().base)
    if len(set(offsets)) != 1:
        fail(f"{label}: asymmetric offsets {offsets}")
    shmem.shmem_barrier_all()
    shmem.shmem_free(p)
    if shmem.shmem_finalize() != 0:
        fail(f"{label}: finalize rc")
    if shmem.shmem_is_initialized():
        fail(f"{label}: still initialized after finalize")


def main() -> None:
    world = MPI.COMM_WORLD
    rank = world.Get_rank()

    if shmem.shmem_mpi_init() != 0:
        fail("shmem_mpi_init rc")
    check_round("shmem_mpi_init", world)

    if shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_MPI_COMM, -1, -1, None) != 0:
        fail("init_attr(MPI_COMM, None) rc")
    check_round("init_attr(MPI_COMM, -1, -1, None)", world)

    dup = world.Dup()
    if shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_MPI_COMM, rank, world.Get_size(), dup) != 0:
        fail("init_attr(MPI_COMM, dup) rc")
    check_round("init_attr(MPI_COMM, rank, nranks, dup)", dup)

    # rank/nranks that contradict the communicator are an argument error, raised before any exchange.
    try:
        shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_MPI_COMM, (rank + 1) % world.Get_size() + 100, -1, None)
    except shmem.InvalidArgumentError:
        pass
    except Exception as exc:
        fail(f"wrong rank: {type(exc).__name__}: {exc}")
    else:
        fail("wrong rank for the communicator was accepted")
    if shmem.shmem_is_initialized():
        fail("initialized after a rejected init")

    world.Barrier()
    print(f"OK {rank}", flush=True)


if __name__ == "__main__":
    main()
