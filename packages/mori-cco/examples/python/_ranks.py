# SPDX-License-Identifier: MIT
"""What every example here does around its ranks: one unique id, one spawned process per rank, and
the worst exit code as the example's own (so a failed rank fails the example)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


def run_ranks(rank_main: Callable[..., None], nranks: int, *args: Any) -> int:
    """Run ``rank_main(rank, nranks, uid, *args)`` in ``nranks`` spawned processes; their worst exit code."""
    import mori.cco

    uid = bytes(mori.cco.get_unique_id())
    ctx = multiprocessing.get_context("spawn")  # fork would copy this process's CUDA state
    procs = [ctx.Process(target=rank_main, args=(rank, nranks, uid, *args)) for rank in range(nranks)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
    return max(proc.exitcode or 0 for proc in procs)


def pick_backend(backend: str) -> str:
    """``--backend auto``: cuda where torch sees a GPU, cpu elsewhere; any other choice as given."""
    if backend != "auto":
        return backend
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
