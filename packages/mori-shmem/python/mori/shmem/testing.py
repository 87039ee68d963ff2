# SPDX-License-Identifier: MIT
"""Multi-process test support for mori-shmem and the packages built on it.

A PE is a process, so a multi-PE test runs one process per PE.  :func:`run_pes` creates the
rendezvous unique id in the calling process and hands it to every child; the processes themselves
are the root package's (:func:`mori.testing.run_processes`): spawned, each with its output in a log
of its own, every one still running at the timeout killed and reported with the end of its log,
never a hang.

Example::

    # tests/pe_programs.py (child functions must be module-level, hence picklable)
    def allreduce_rank(rank, nranks, uid):
        with mori.shmem.session(rank, nranks, uid):  # init_pe ... shmem_finalize, however it ends
            ...
            return value

    # tests/test_x.py
    results = run_pes(pe_programs.allreduce_rank, 4, env={"MORI_SHMEM_HEAP_SIZE": "64M"})

The child function is called as ``fn(rank, nranks, uid, *args)``.  It must initialize mori-shmem
itself (typically through :func:`init_pe`), so that tests can exercise the failure modes of
initialization too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mori.testing._logs import patched_environ
from mori.testing.launcher import (
    DEFAULT_FAILURE_GRACE_S,
    PeFailure,
    RankError,
    check_launch,
    find_free_port,
    run_processes,
)

__all__ = [
    "PeFailure",
    "RankError",
    "find_free_port",
    "init_pe",
    "run_pes",
]


def init_pe(rank: int, nranks: int, uid: bytes) -> int:
    """Initializes mori-shmem in this process as ``rank`` of ``nranks`` over the unique id ``uid``.

    Equivalent to ``shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)``; returns
    its result (0).
    """
    import mori.shmem as shmem

    return shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)


def run_pes(
    fn: Callable[..., Any],
    nranks: int,
    *args: Any,
    timeout: float = 60.0,
    env: Mapping[str, str | None] | None = None,
    return_exceptions: bool = False,
    uid: bytes | None = None,
    failure_grace: float = DEFAULT_FAILURE_GRACE_S,
) -> list[Any]:
    """Runs ``fn(rank, nranks, uid, *args)`` in ``nranks`` spawned processes and collects the results:
    :func:`mori.testing.run_processes` with a mori-shmem unique id as the first argument, so its
    arguments, results and errors (:class:`PeFailure`, :class:`RankError`) are that function's.

    Args:
        fn: A module-level (picklable) function. It must initialize mori-shmem itself, for instance
            with :func:`init_pe`, and should finalize it.
        env: As for run_processes; the unique id is also created under this environment (so
            ``MORI_SOCKET_IFNAME`` applies to it).
        uid: Use this unique id instead of creating one with ``shmem_get_unique_id()``.
    """
    check_launch(nranks, timeout)
    if uid is None:
        import mori.shmem as shmem

        with patched_environ(env):
            uid = shmem.shmem_get_unique_id()
    return run_processes(
        fn,
        nranks,
        uid,
        *args,
        timeout=timeout,
        env=env,
        return_exceptions=return_exceptions,
        failure_grace=failure_grace,
        label=f"run_pes({getattr(fn, '__qualname__', fn)}, {nranks})",
    )
