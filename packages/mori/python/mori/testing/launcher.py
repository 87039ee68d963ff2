# SPDX-License-Identifier: MIT
"""N PEs as N processes, for multi-PE tests, never a hang.

:func:`run_processes` runs a module-level function in N Python processes (forked from a warm fork
server under the pytest plugin, else spawned: :mod:`mori.testing._start`);
:func:`run_commands` runs N executables (C++ ranks). Both give each process a log of its own (its
stdout and stderr; for Python processes under the pytest plugin, or when asked), kill every
process still running at the timeout (shortened to end before the running test's deadline under
the pytest plugin), and either return each rank's outcome or raise :class:`PeFailure`, which says
which rank raised, exited, died or hung, with the end of its log. A peer that dies gives an error
after a short drain, never a hang.

Example::

    # tests/programs.py (module level, so the processes can import it)
    def exchange(rank, nranks, port):
        ...
        return value

    # tests/test_x.py
    results = run_processes(programs.exchange, 4, find_free_port(), timeout=60)
"""

from __future__ import annotations

import dataclasses
import faulthandler
import logging
import os
import pickle
import queue as queue_module
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mori.testing._logs import (
    ProcessLog,
    apply_env,
    bounded_timeout,
    capturing,
    pack_call,
    record,
    redirect_output,
    unpack_call,
)
from mori.testing._start import starter

__all__ = ["CommandResult", "PeFailure", "RankError", "find_free_port", "run_commands", "run_processes"]

logger = logging.getLogger("mori.testing")

# How long a launcher keeps collecting the other ranks' outcomes after one rank failed (when
# return_exceptions is False): long enough for the peers of a failed PE to notice and report
# their own error (PeerLostError, ...), short enough that a broken test fails fast.
DEFAULT_FAILURE_GRACE_S = 10.0

# After a child process has exited, how long to wait for its message to arrive on the queue
# before declaring that it died without reporting.
_EXIT_DRAIN_S = 2.0
_POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class RankError:
    """The outcome of a rank that did not return normally.

    Attributes:
        type_name: The class name of the exception the rank raised (``"PeerLostError"``), or
            ``"Timeout"`` when the rank did not finish in time, ``"ProcessDied"`` when the process
            exited without reporting (``os._exit``, a signal, a crash), or ``"ExitStatus"`` when an
            executable exited with a nonzero status.
        message: ``str(exception)``, or a description of the timeout / exit.
        traceback: The formatted traceback of the exception in the child ("" if none).
        type_names: The names of every class in the exception's MRO, most derived first, so that
            ``"TimeoutError" in err.type_names`` works without importing the class.
        exitcode: The child's exit code when known (negative: killed by that signal).
        log: The end of the rank's output (stdout and stderr), "" when it printed nothing.
    """

    type_name: str
    message: str
    traceback: str = ""
    type_names: tuple[str, ...] = ()
    exitcode: int | None = None
    log: str = ""

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
                if outcome.log.strip():
                    lines.append(f"--- rank {rank}'s output (end):\n{outcome.log.rstrip()}")
            else:
                lines.append(f"--- rank {rank}: ok ({_short_repr(outcome)})")
        super().__init__("\n".join(lines))


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What one rank of :func:`run_commands` printed, after it exited with status 0."""

    rank: int
    stdout: str
    stderr: str


def _short_repr(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (for a rendezvous or a server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def check_launch(nranks: int, timeout: float) -> None:
    """Refuses a launch that cannot run, before anything starts."""
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")


def _describe_exception(exc: BaseException) -> dict[str, Any]:
    return {
        "type_name": type(exc).__name__,
        "type_names": tuple(cls.__name__ for cls in type(exc).__mro__),
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    }


def _child_main(
    call: bytes | tuple[Any, ...],
    rank: int,
    nranks: int,
    env: Mapping[str, str | None] | None,
    results: Any,
    dump_after_s: float | None,
    log_path: str | None,
) -> None:
    """Entry point of a PE: runs the function and reports its outcome on the results queue."""
    if log_path is not None:
        redirect_output(log_path)
    # The parent already put env into the environment this process was started with; applying
    # it again here also covers start methods that do not inherit the parent's environment.
    if env:
        apply_env(env)
    if dump_after_s is not None and dump_after_s > 0:
        # If the PE hangs, write every thread's stack to its log shortly before the parent kills it.
        faulthandler.dump_traceback_later(dump_after_s, exit=False)
    try:
        fn, args = unpack_call(call)
        value = fn(rank, nranks, *args)
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


class _Collector:
    """The per-rank outcomes of one launch, and the deadline that shrinks once a rank fails."""

    def __init__(self, nranks: int, timeout: float, return_exceptions: bool, failure_grace: float) -> None:
        self.nranks = nranks
        self.timeout = timeout
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.return_exceptions = return_exceptions
        self.failure_grace = failure_grace
        self.outcomes: dict[int, Any] = {}
        self.exited_at: dict[int, float] = {}

    def running(self) -> bool:
        return len(self.outcomes) < self.nranks and time.monotonic() < self.deadline

    def add(self, rank: int, outcome: Any) -> None:
        self.outcomes[rank] = outcome
        if isinstance(outcome, RankError):
            logger.debug("rank %d failed: %s", rank, outcome)
            if not self.return_exceptions:
                self.deadline = min(self.deadline, time.monotonic() + self.failure_grace)

    def finish(self, logs: Sequence[ProcessLog], exitcodes: Sequence[int | None], label: str) -> list[Any]:
        elapsed = time.monotonic() - self.start
        ordered: list[Any] = []
        for rank in range(self.nranks):
            if rank in self.outcomes:
                outcome = self.outcomes[rank]  # None too: a PE may return None
            else:
                outcome = RankError(
                    "Timeout",
                    f"rank {rank} did not finish within {elapsed:.1f} s (timeout {self.timeout:.1f} s); killed",
                )
            if isinstance(outcome, RankError):
                code = outcome.exitcode if outcome.exitcode is not None else exitcodes[rank]
                outcome = dataclasses.replace(outcome, exitcode=code, log=logs[rank].tail())
            ordered.append(outcome)
        for log in logs:
            record(log)
        if not self.return_exceptions and any(isinstance(o, RankError) for o in ordered):
            raise PeFailure(ordered, f"{label} failed")
        return ordered


def run_processes(
    fn: Callable[..., Any],
    nranks: int,
    *args: Any,
    timeout: float = 60.0,
    env: Mapping[str, str | None] | None = None,
    return_exceptions: bool = False,
    failure_grace: float = DEFAULT_FAILURE_GRACE_S,
    label: str | None = None,
    capture_output: bool | None = None,
) -> list[Any]:
    """Runs ``fn(rank, nranks, *args)`` in ``nranks`` processes and collects the results.

    Args:
        fn: A module-level (picklable) function.
        nranks: The number of processes (PEs) to start.
        *args: Extra picklable arguments passed to every rank.
        timeout: Seconds the whole job may take; ranks still running then are killed. Under the
            pytest plugin it is shortened to end a few seconds before the test's own timeout.
        env: Environment variables for the children (a value of None unsets the variable). They are
            in the environment the children start with, so they are visible before any module reads them.
        return_exceptions: When True, return a :class:`RankError` in place of the result of each
            rank that raised, died or timed out, instead of raising :class:`PeFailure`; every rank
            then gets the full timeout to finish.
        failure_grace: When return_exceptions is False and a rank fails, the other ranks get this many
            more seconds (within the timeout) to report before they are killed.
        label: How errors name this launch (default ``run_processes(<fn>, <nranks>)``).
        capture_output: Send each PE's stdout and stderr to a log of its own, quoted in errors
            (True), or let them print where this process prints (False). Default: capture under
            the pytest plugin, print elsewhere.

    Returns:
        The per-rank results, indexed by rank.

    Raises:
        PeFailure: (unless return_exceptions) a rank raised, died or did not finish in time; the
            message carries every rank's outcome, traceback and the end of its output.
    """
    check_launch(nranks, timeout)
    name = getattr(fn, "__qualname__", repr(fn))
    label = label or f"run_processes({name}, {nranks})"
    call = pack_call((fn, tuple(args)))
    capture = capturing(capture_output)
    start = starter(env, capture, call)  # may first start the fork server: before the timeout runs
    timeout = bounded_timeout(timeout)
    results = start.ctx.Queue()
    procs: list[Any] = []
    log_dir = Path(tempfile.mkdtemp(prefix="mori-pes-"))
    logs = [ProcessLog(log_dir, f"PE {rank} of {label}") for rank in range(nranks)]
    collector = _Collector(nranks, timeout, return_exceptions, failure_grace)
    # Ask the children to dump their stacks a little before the parent gives up on them.
    dump_after_s = max(timeout - 2.0, timeout * 0.9)
    try:
        for rank in range(nranks):
            log_path = str(logs[rank].path) if capture else None
            child_args = (call, rank, nranks, dict(env) if env else None, results, dump_after_s, log_path)
            procs.append(start.start(_child_main, child_args, name=f"mori-pe-{rank}"))
        logger.debug("started %d PEs for %s (%s)", nranks, name, start.method)
        while collector.running():
            try:
                wait = min(_POLL_S, max(collector.deadline - time.monotonic(), 0.001))
                rank, ok, payload = results.get(timeout=wait)
            except queue_module.Empty:
                _note_silent_exits(collector, procs)
            else:
                collector.add(rank, payload if ok else RankError(**payload))
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
        for proc in procs:
            proc.join(timeout=10.0)
        results.close()
        results.cancel_join_thread()
    try:
        return collector.finish(logs, [proc.exitcode for proc in procs], label)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _note_silent_exits(collector: _Collector, procs: Sequence[Any]) -> None:
    """Ranks whose process is gone without a message: give the queue a moment, then give up on them."""
    now = time.monotonic()
    for rank, proc in enumerate(procs):
        if rank in collector.outcomes or proc.exitcode is None:
            continue
        if now - collector.exited_at.setdefault(rank, now) >= _EXIT_DRAIN_S:
            message = f"rank {rank} exited with code {proc.exitcode} without reporting a result"
            collector.add(rank, RankError("ProcessDied", message, exitcode=proc.exitcode))


def run_commands(
    commands: Sequence[Sequence[str]],
    *,
    timeout: float = 90.0,
    env: Mapping[str, str] | None = None,
    return_exceptions: bool = False,
    failure_grace: float = DEFAULT_FAILURE_GRACE_S,
    label: str | None = None,
) -> list[Any]:
    """Runs ``commands[rank]`` for every rank at once (executables, such as C++ ranks), and waits.

    Each rank's stdout and stderr go to files of their own (no pipe fills up). A rank that exits
    with a nonzero status fails; the others then get ``failure_grace`` seconds before they are
    killed; every rank still running at the timeout is killed.

    Returns:
        One :class:`CommandResult` per rank (or a :class:`RankError` for a failed rank, with
        return_exceptions).

    Raises:
        PeFailure: (unless return_exceptions) a rank exited with a nonzero status or did not
            finish in time; the message carries the end of each failed rank's stderr.
    """
    nranks = len(commands)
    check_launch(nranks, timeout)
    label = label or f"run_commands({Path(commands[0][0]).name}, {nranks})"
    collector = _Collector(nranks, bounded_timeout(timeout), return_exceptions, failure_grace)
    log_dir = Path(tempfile.mkdtemp(prefix="mori-ranks-"))
    outs = [ProcessLog(log_dir, f"rank {rank} stdout of {label}") for rank in range(nranks)]
    errs = [ProcessLog(log_dir, f"rank {rank} stderr of {label}") for rank in range(nranks)]
    procs: list[subprocess.Popen[bytes]] = []
    full_env = {**os.environ, **(env or {})}
    try:
        for rank, argv in enumerate(commands):
            with open(outs[rank].path, "wb") as out, open(errs[rank].path, "wb") as err:
                procs.append(subprocess.Popen([str(a) for a in argv], stdout=out, stderr=err, env=full_env))
        while collector.running():
            for rank, proc in enumerate(procs):
                if rank in collector.outcomes or proc.poll() is None:
                    continue
                if proc.returncode == 0:
                    collector.add(rank, CommandResult(rank, outs[rank].read(sys.maxsize), errs[rank].read(sys.maxsize)))
                else:
                    message = f"rank {rank} exited with status {proc.returncode}"
                    collector.add(rank, RankError("ExitStatus", message, exitcode=proc.returncode))
            time.sleep(_POLL_S)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait(timeout=10.0)
    try:
        for log in outs:
            record(log)
        return collector.finish(errs, [proc.returncode for proc in procs], label)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
