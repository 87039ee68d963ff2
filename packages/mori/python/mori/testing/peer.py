# SPDX-License-Identifier: MIT
"""One helper process driven over a pipe: a second engine, a pool node, a writer to kill.

``fn(conn, *args, **kwargs)`` runs in a process of its own (started as :mod:`mori.testing._start`
says) with ``conn`` its end of a pipe; the test reads what it sends (:meth:`PeerProcess.recv`) and
asks it commands (:meth:`PeerProcess.ask`). A peer that dies, hangs or never answers gives a
:class:`PeerError` naming the peer, what was awaited, its exit code and the end of its output;
never a hang.

Example::

    # tests/peer_programs.py (module level, so the process can import it)
    def serve(conn, size):
        conn.send(("ready", size))
        while (cmd := conn.recv())[0] != "exit":
            conn.send(answer(cmd))
        conn.send(True)

    # tests/test_x.py
    with PeerProcess(peer_programs.serve, 4096) as peer:
        _, size = peer.recv(timeout=60, what="its start")
        assert peer.ask("digest", 0, size) == expected
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
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

__all__ = ["PeerError", "PeerProcess"]

_POLL_S = 0.1


class PeerError(RuntimeError):
    """A peer process died, hung, or closed its pipe before sending what the test awaited."""


def _peer_main(
    call: bytes | tuple[Any, ...], conn: Any, log_path: str | None, env: Mapping[str, str | None] | None
) -> None:
    if log_path is not None:
        redirect_output(log_path)
    if env:
        apply_env(env)
    fn, args, kwargs = unpack_call(call)
    fn(conn, *args, **kwargs)


class PeerProcess:
    """``fn(conn, *args, **kwargs)`` in a (daemon) process of its own, with ``conn`` its end of a pipe.

    Args:
        fn: A module-level (picklable) function.
        name: How errors and the failed test's report name the peer (default: fn's name).
        env: Environment variables for the peer (a value of None unsets the variable).
        capture_output: Send the peer's stdout and stderr to its log, quoted in errors (True), or
            let them print where this process prints (False). Default: capture under the pytest
            plugin, print elsewhere.

    Attributes:
        proc: The ``multiprocessing.Process``.
        conn: This process's end of the pipe.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        name: str | None = None,
        env: Mapping[str, str | None] | None = None,
        capture_output: bool | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name or getattr(fn, "__name__", "peer")
        self._log_dir = Path(tempfile.mkdtemp(prefix="mori-peer-"))
        self.log = ProcessLog(self._log_dir, f"peer {self.name}")
        call = pack_call((fn, tuple(args), kwargs))
        capture = capturing(capture_output)
        start = starter(env, capture, call)
        self.conn, child = start.ctx.Pipe()
        log_path = str(self.log.path) if capture else None
        self.proc = start.start(_peer_main, (call, child, log_path, dict(env) if env else None))
        child.close()  # the peer holds the only other end now: its death reads as EOF here
        self._finished = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def is_alive(self) -> bool:
        return self.proc.is_alive()

    def send(self, message: Any) -> None:
        self.conn.send(message)

    def recv(self, timeout: float = 30.0, what: str = "a message") -> Any:
        """The next message the peer sends; :class:`PeerError` (and the peer killed) when it sends
        none within ``timeout`` seconds (shortened to end before the running test's deadline), dies
        or closes its pipe."""
        limit = bounded_timeout(timeout)
        deadline = time.monotonic() + limit
        while True:
            left = deadline - time.monotonic()
            if self.conn.poll(min(max(left, 0.0), _POLL_S)):
                try:
                    return self.conn.recv()
                except EOFError:
                    self.proc.join(1.0)  # a closed pipe: the process is exiting, let it finish
                    raise self._error(f"closed its pipe before sending {what}") from None
            if left <= 0:
                raise self._error(f"did not send {what} within {limit:.1f} s")

    def ask(self, *command: Any, timeout: float = 30.0) -> Any:
        """Sends ``command`` (a tuple whose first item names it) and returns the peer's answer."""
        self.conn.send(command)
        return self.recv(timeout, what=f"an answer to {command[0]!r}")

    def close(self, *exit_command: Any, timeout: float = 30.0) -> None:
        """Asks the peer ``exit_command`` (when given, and the peer is alive), waits up to ``timeout``
        seconds for it to exit, then kills it if it still runs."""
        if exit_command and self.proc.is_alive():
            with contextlib.suppress(PeerError):  # a peer that does not answer is killed below
                self.ask(*exit_command, timeout=timeout)
            self.proc.join(timeout)
        self.kill()

    def kill(self) -> None:
        """Kills the peer (SIGKILL) if it runs, and keeps its log for the test's report."""
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(10)
        if not self._finished:
            self._finished = True
            record(self.log)
            self.conn.close()
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()

    def _error(self, what: str) -> PeerError:
        """The error for a peer that failed the test; the peer is killed (a peer that missed one
        answer is out of step with its pipe) and its log kept for the report."""
        alive = "still running, killed" if self.proc.is_alive() else f"exited with code {self.proc.exitcode}"
        tail = self.log.tail().rstrip() or "(nothing)"
        error = PeerError(f"peer {self.name} (pid {self.proc.pid}, {alive}) {what}; the end of its output:\n{tail}")
        self.kill()
        return error
