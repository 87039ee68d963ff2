"""Release smoke job of mori-shmem: two PEs on the cpu backend each put their rank into the
other's copy of a symmetric buffer (the quickstart's ring). Exit status 0 and "OK" when it held."""

from __future__ import annotations

import numpy as np

import mori.shmem as ms
from mori.shmem.testing import run_pes


def program(rank: int, nranks: int, uid: bytes) -> list[int]:
    with ms.session(rank, nranks, uid):
        buf = ms.shmem_zeros(4, np.int64)
        ms.shmem_barrier_all()
        ms.shmem_put(buf, np.full(4, rank, np.int64), pe=(rank + 1) % nranks)
        ms.shmem_barrier_all()
        return [int(v) for v in buf.numpy()]


if __name__ == "__main__":
    got = run_pes(program, 2, timeout=60.0)
    # Each PE holds its left neighbour's rank: a ring of two swaps the ranks.
    if got != [[1, 1, 1, 1], [0, 0, 0, 0]]:
        raise SystemExit(f"shmem ring of 2 PEs: got {got}")
    print("OK")
