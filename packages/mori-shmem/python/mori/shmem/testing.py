# SPDX-License-Identifier: MIT
"""Multi-process test support for mori-shmem and the packages built on it.

A PE is a process, so a multi-PE test runs one process per PE.  :func:`run_pes` starts them with
the multiprocessing ``spawn`` method, creates the rendezvous unique id in the calling process and
hands it to every child, collects each rank's return value (or its exception, with the formatted
traceback) through a queue, and never hangs: every child that has not finished when the timeout
expires is killed and reported.

Example::

    # tests/pe_programs.py (child functions must be module-level, hence picklable)
    def allreduce_rank(rank, nranks, uid):
        init_pe(rank, nranks, uid)
        try:
            ...
            return value
        finally:
            mori.shmem.shmem_finalize()

    # tests/test_x.py
    results = run_pes(pe_programs.allreduce_rank, 4, env={"MORI_SHMEM_HEAP_SIZE": "64M"})

The child function is called as ``fn(rank, nranks, uid, *args)``.  It must initialize mori-shmem
itself (typically through :func:`init_pe`), so that tests can exercise the failure modes of
initialization too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import faulthandler
import logging
import multiprocessing
import os
import pickle
import queue as queue_module
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "PeFailure",
    "RankError",
    "find_free_port",
    "init_pe",
    "run_pes",
]

logger = logging.getLogger("mori.shmem.testing")

# How long run_pes keeps collecting the other ranks' outcomes after one rank failed (when
# return_exceptions is False): long enough for the peers of a failed PE to notice and report
# their own error (PeerLostError, ...), short enough that a broken test fails fast.
DEFAULT_FAILURE_GRACE_S = 10.0

# After a child process has exited, how long to wait for its message to arrive on the queue
# before declaring that it died without reporting.
_EXIT_DRAIN_S = 2.0

# Serialises the temporary os.environ changes of concurrent run_pes calls.
_ENV_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class RankError:
    """The outcome of a rank that did not return normally.

    Attributes:
        type_name: The class name of the exception the rank raised (``"PeerLostError"``), or
            ``"Timeout"`` when the rank did not finish in time, or ``"ProcessDied"`` when the
            process exited without reporting (``os._exit``, a signal, a crash).
        message: ``str(exception)``, or a description of the timeout / exit.
        traceback: The formatted traceback of the exception in the child ("" if none).
        type_names: The names of every class in the exception's MRO, most derived first, so that
            ``"TimeoutError" in err.type_names`` works without importing the class.
        exitcode: The child's exit code when known (negative: killed by that signal).
    """

    type_name: str
    message: str
    traceback: str = ""
    type_names: tuple[str, ...] = ()
    exitcode: int | None = None

    def is_a(self, *names: str) -> bool:
        """True when the rank raised an exception that is an instance of any class named in names."""
        mro = self.type_names or (self.type_name,)
        return any(name in mro for name in names)

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message}"


class PeFailure(RuntimeError):
    """One or more PEs raised, died, or did not finish within the timeout.

    Attributes:
        outcomes: One entry per rank: the rank's return value, or a :class:`RankError`.
        failed_ranks: The ranks whose outcome is a :class:`RankError`.
    """

    def __init__(self, outcomes: Sequence[Any], summary: str = "") -> None:
        self.outcomes = list(outcomes)
        self.failed_ranks = [r for r, o in enumerate(self.outcomes) if isinstance(o, RankError)]
        lines = [summary or f"{len(self.failed_ranks)} of {len(self.outcomes)} PEs failed"]
        for rank, outcome in enumerate(self.outcomes):
            if isinstance(outcome, RankError):
                lines.append(f"--- rank {rank}: {outcome.type_name}: {outcome.message}")
                if outcome.traceback:
                    lines.append(outcome.traceback.rstrip())
            else:
                lines.append(f"--- rank {rank}: ok ({_short_repr(outcome)})")
        super().__init__("\n".join(lines))


def _short_repr(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def init_pe(rank: int, nranks: int, uid: bytes) -> int:
    """Initializes mori-shmem in this process as ``rank`` of ``nranks`` over the unique id ``uid``.

    Equivalent to ``shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)``; returns
    its result (0).
    """
    import mori.shmem as shmem

    return shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (for torch.distributed's tcp:// init)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _patched_environ(env: Mapping[str, str | None] | None) -> Iterator[None]:
    """Applies env to os.environ for the duration (None values unset the variable)."""
    if not env:
        yield
        return
    with _ENV_LOCK:
        saved = {name: os.environ.get(name) for name in env}
        try:
            _apply_env(env)
            yield
        finally:
            _apply_env(saved)


def _apply_env(env: Mapping[str, str | None]) -> None:
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


def _describe_exception(exc: BaseException) -> dict[str, Any]:
    return {
        "type_name": type(exc).__name__,
        "type_names": tuple(cls.__name__ for cls in type(exc).__mro__),
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


def _child_main(
    fn: Callable[..., Any],
    rank: int,
    nranks: int,
    uid: bytes,
    args: tuple[Any, ...],
    env: Mapping[str, str | None] | None,
    results: Any,
    dump_after_s: float | None,
) -> None:
    """Entry point of a spawned PE: runs fn and reports its outcome on the results queue."""
    # The parent already put env into the environment this process was started with; applying
    # it again here also covers start methods that do not inherit the parent's environment.
    if env:
        _apply_env(env)
    if dump_after_s is not None and dump_after_s > 0:
        # If the PE hangs, write every thread's stack to stderr shortly before the parent kills it.
        faulthandler.dump_traceback_later(dump_after_s, exit=False)
    try:
        value = fn(rank, nranks, uid, *args)
        # Queue.put pickles in a background thread and drops what fails there: check here.
        pickle.dumps(value)
    except BaseException as exc:
        message: tuple[Any, ...] = (rank, False, _describe_exception(exc))
    else:
        message = (rank, True, value)
    try:
        results.put(message)
    finally:
        faulthandler.cancel_dump_traceback_later()
        results.close()
        results.join_thread()
        sys.stdout.flush()
        sys.stderr.flush()


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
    """Runs ``fn(rank, nranks, uid, *args)`` in ``nranks`` spawned processes and collects the results.

    Args:
        fn: A module-level (picklable) function. It must initialize mori-shmem itself, for instance
            with :func:`init_pe`, and should finalize it.
        nranks: The number of processes (PEs) to start.
        *args: Extra picklable arguments passed to every rank.
        timeout: Seconds the whole job may take; ranks still running then are killed.
        env: Environment variables for the children (a value of None unsets the variable). They are
            in the environment the children start with, so they are visible before any module
            (mori.shmem included) reads them. The unique id is also created under this environment
            (so ``MORI_SOCKET_IFNAME`` applies to it).
        return_exceptions: When True, return a :class:`RankError` in place of the result of each
            rank that raised, died or timed out, instead of raising :class:`PeFailure`; every rank
            then gets the full timeout to finish.
        uid: Use this unique id instead of creating one with ``shmem_get_unique_id()``.
        failure_grace: When return_exceptions is False and a rank fails, the other ranks get this many
            more seconds (within the timeout) to report before they are killed.

    Returns:
        The per-rank results, indexed by rank.

    Raises:
        PeFailure: (unless return_exceptions) a rank raised, died or did not finish in time; the
            message carries every rank's outcome and traceback.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    outcomes: dict[int, Any] = {}
    procs: list[Any] = []
    start = time.monotonic()
    deadline = start + timeout
    # Ask the children to dump their stacks a little before the parent gives up on them.
    dump_after_s = max(timeout - 2.0, timeout * 0.9)
    try:
        with _patched_environ(env):
            if uid is None:
                import mori.shmem as shmem

                uid = shmem.shmem_get_unique_id()
            for rank in range(nranks):
                proc = ctx.Process(
                    target=_child_main,
                    args=(fn, rank, nranks, uid, tuple(args), dict(env) if env else None, results, dump_after_s),
                    name=f"mori-pe-{rank}",
                    daemon=True,
                )
                proc.start()
                procs.append(proc)
        logger.debug("started %d PEs for %s", nranks, getattr(fn, "__qualname__", fn))

        exited_at: dict[int, float] = {}
        while len(outcomes) < nranks:
            now = time.monotonic()
            if now >= deadline:
                break
            try:
                rank, ok, payload = results.get(timeout=min(0.05, max(deadline - now, 0.001)))
            except queue_module.Empty:
                pass
            else:
                outcomes[rank] = payload if ok else RankError(**payload)
                if not ok:
                    logger.debug("rank %d failed: %s", rank, outcomes[rank])
                    if not return_exceptions:
                        deadline = min(deadline, time.monotonic() + failure_grace)
                continue
            # Ranks whose process is gone without a message: give the queue a moment, then give up.
            now = time.monotonic()
            for rank, proc in enumerate(procs):
                if rank in outcomes or proc.exitcode is None:
                    continue
                first_seen = exited_at.setdefault(rank, now)
                if now - first_seen >= _EXIT_DRAIN_S:
                    outcomes[rank] = RankError(
                        "ProcessDied",
                        f"rank {rank} exited with code {proc.exitcode} without reporting a result",
                        exitcode=proc.exitcode,
                    )
                    if not return_exceptions:
                        deadline = min(deadline, time.monotonic() + failure_grace)
        elapsed = time.monotonic() - start
        for rank in range(nranks):
            if rank not in outcomes:
                outcomes[rank] = RankError(
                    "Timeout",
                    f"rank {rank} did not finish within {elapsed:.1f} s (timeout {timeout:.1f} s); killed",
                )
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for proc in procs:
            proc.join(timeout=10.0)
        results.close()
        results.cancel_join_thread()

    ordered = [outcomes[rank] for rank in range(nranks)]
    for rank, proc in enumerate(procs):
        outcome = ordered[rank]
        if isinstance(outcome, RankError) and outcome.exitcode is None and proc.exitcode is not None:
            ordered[rank] = dataclasses.replace(outcome, exitcode=proc.exitcode)
    if not return_exceptions and any(isinstance(o, RankError) for o in ordered):
        raise PeFailure(ordered, f"run_pes({getattr(fn, '__qualname__', fn)}, {nranks}) failed")
    return ordered
