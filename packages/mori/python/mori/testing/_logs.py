# SPDX-License-Identifier: MIT
"""Per-process logs, and what the pytest plugin shares with the launchers: the running test's
deadline (so that a launcher gives up on its processes, and says which one hung, before the test's
own timeout fires) and the logs to show when the test fails."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

#: How much of a failed process's log an error message quotes (its end: where it failed).
LOG_TAIL_CHARS = 4000
#: How much of each process's log a failed test's report shows.
REPORT_CHARS = 64 * 1024
#: A launcher stops this long before the test's deadline, to kill, collect and report in time.
DEADLINE_MARGIN_S = 5.0
#: The shortest timeout a launcher is given, however close the test's deadline is.
MIN_TIMEOUT_S = 1.0

_state_lock = threading.Lock()
_test_deadline: float | None = None
_recording = False
_recorded: list[tuple[str, str]] = []

# Serialises the temporary os.environ changes of concurrent launches (children inherit os.environ).
_ENV_LOCK = threading.Lock()


class ProcessLog:
    """The file that one child process writes its stdout and stderr to."""

    def __init__(self, directory: Path, title: str) -> None:
        self.title = title
        self.path = directory / (re.sub(r"[^A-Za-z0-9_.-]+", "_", title) + ".log")
        self.path.touch()

    def read(self, limit: int = REPORT_CHARS) -> str:
        """The log's last ``limit`` characters ("" when the file is gone)."""
        try:
            text = self.path.read_text(errors="replace")
        except OSError:
            return ""
        return text if len(text) <= limit else "[...]\n" + text[-limit:]

    def tail(self) -> str:
        return self.read(LOG_TAIL_CHARS)


def redirect_output(path: str) -> None:
    """In a child process: sends file descriptors 1 and 2 (Python's streams, faulthandler's stack
    dumps and native code's output alike) to the file at ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)  # a killed process keeps what it printed


def pack_call(call: tuple[Any, ...]) -> bytes | tuple[Any, ...]:
    """The function and arguments a child runs, pickled here: the child unpickles them only after
    its output goes to its log, so that an import error there lands in the log too. Objects that
    only multiprocessing itself can pass (queues, locks) travel as they are."""
    try:
        return pickle.dumps(call)
    except Exception:
        return call


def unpack_call(packed: bytes | tuple[Any, ...]) -> tuple[Any, ...]:
    return pickle.loads(packed) if isinstance(packed, bytes) else packed


def apply_env(env: Mapping[str, str | None]) -> None:
    """Sets each variable (a value of None unsets it)."""
    for name, value in env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)


@contextlib.contextmanager
def patched_environ(env: Mapping[str, str | None] | None) -> Iterator[None]:
    """Applies ``env`` to os.environ for the duration: children started meanwhile see it before
    any module of theirs reads it."""
    if not env:
        yield
        return
    with _ENV_LOCK:
        saved = {name: os.environ.get(name) for name in env}
        try:
            apply_env(env)
            yield
        finally:
            apply_env(saved)


def set_test_deadline(deadline: float | None) -> None:
    """The time.monotonic() by which the running test must end (None: no test deadline)."""
    global _test_deadline
    _test_deadline = deadline


def bounded_timeout(timeout: float) -> float:
    """``timeout``, shortened to end before the running test's deadline."""
    deadline = _test_deadline
    if deadline is None:
        return timeout
    left = deadline - time.monotonic() - DEADLINE_MARGIN_S
    return max(min(timeout, left), MIN_TIMEOUT_S)


def start_recording() -> None:
    """From now on, keep every finished process's log for :func:`take_recorded` (the plugin's)."""
    global _recording
    _recording = True
    take_recorded()


def under_pytest_plugin() -> bool:
    """Whether this process runs tests under mori's pytest plugin."""
    return _recording


def capturing(requested: bool | None) -> bool:
    """Whether a launch sends its children's output to logs: as requested, else under the pytest
    plugin (a failed test shows the logs) and not elsewhere (a benchmark's or an example's PEs
    print to the terminal as they run)."""
    return _recording if requested is None else requested


def record(log: ProcessLog) -> None:
    if _recording:
        with _state_lock:
            _recorded.append((log.title, log.read()))


def take_recorded() -> list[tuple[str, str]]:
    """The (title, text) of the logs recorded since the last call."""
    with _state_lock:
        taken = list(_recorded)
        _recorded.clear()
    return taken
