# SPDX-License-Identifier: MIT
"""How the launchers start a child process: forked from a warm fork server, or spawned.

A spawned Python process imports everything its function needs afresh: torch alone takes 1-3 s of
CPU on a loaded 2-core CI machine, which made most of the time of a short multi-PE test. Under the
pytest plugin (and with pytest as ``__main__``), a launch instead forks its processes from
:mod:`multiprocessing`'s fork server, started once per test session with ``__main__`` (pytest's
script) and the modules of :data:`PRELOAD_CANDIDATES` that the test process has itself imported
already: every PE is still a process of its own, started with those modules loaded (shared,
copy-on-write). Outside pytest (benchmarks, examples) launches are spawned as before.

What stays as it was with spawn:

- The environment. A forked process inherits the server's environment, not the launcher's. The
  PE's first code (:mod:`mori.testing._pe_boot`, run by path, so before any ``mori`` module is
  imported) makes its environment exactly the one a spawned PE would have started with. Modules
  the server imported read the server's environment, though: a launch whose environment differs
  from it in any variable those modules might read (anything but ``MORI_*``, which only mori's own
  modules read and the server never imports them, and :data:`FORK_SAFE_NAMES`) is spawned.
- CUDA. The server only imports modules; neither numpy nor torch makes a CUDA context when
  imported, so a forked PE makes its own, as a spawned one does (the GPU suites check it).
- Output. A forked PE writes to its own log; a launch whose children print where the launcher
  prints (capture off) is spawned, since a forked child's stdout would be the server's. A forked
  PE ends with ``os._exit`` once its function returned and its result was sent (the boot flushes
  the C library's buffers first): no interpreter teardown, which a spawned PE did after that.
- Failure. A server that does not start within the test's time is not used again: the launches of
  the session are spawned.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import runpy
import sys
import threading
from collections.abc import Callable, Mapping
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from mori.testing import _pe_boot
from mori.testing._logs import _ENV_LOCK, bounded_timeout, patched_environ, under_pytest_plugin

logger = logging.getLogger("mori.testing")

#: Modules the fork server imports when the launching process has imported them: costly to import,
#: and they read no variable a launch may change without falling back to spawn (none named MORI_*).
PRELOAD_CANDIDATES = ("numpy", "torch")
#: Variables besides MORI_* whose value may differ between the server and a forked PE (pytest sets
#: PYTEST_CURRENT_TEST for every test; nothing reads it at import).
FORK_SAFE_NAMES = frozenset({"PYTEST_CURRENT_TEST"})
#: The longest a launch waits for the fork server to come up (its first start imports torch).
SERVER_START_LIMIT_S = 120.0

_BOOT_PATH = str(Path(_pe_boot.__file__).resolve())

_server_lock = threading.Lock()
_server_environ: dict[str, str] | None = None  # the environment the running server started with
_server_pid: int | None = None
_server_broken = False


def fork_safe(name: str) -> bool:
    """Whether no module the fork server imports reads the variable ``name``."""
    return name.startswith("MORI_") or name in FORK_SAFE_NAMES


class Starter:
    """Starts the processes of one launch, all the same way."""

    def __init__(
        self,
        ctx: SpawnContext | ForkServerContext,
        env: Mapping[str, str | None] | None,
        environ: dict[str, str] | None,
    ) -> None:
        self.ctx = ctx
        self.env = env
        self._environ = environ  # forked: the environment the boot sets first; spawned: None

    @property
    def method(self) -> str:
        return "forkserver" if self._environ is not None else "spawn"

    def start(self, entry: Callable[..., None], args: tuple[Any, ...], name: str | None = None) -> BaseProcess:
        """Starts ``entry(*args)`` (a module-level function) as a daemon process, and returns it."""
        proc: BaseProcess
        if self._environ is None:
            # The children inherit os.environ: they see env from their first instruction on.
            with patched_environ(self.env):
                proc = self.ctx.Process(target=entry, args=args, name=name, daemon=True)
                proc.start()
            return proc
        boot_args = (self._environ, entry.__module__, entry.__qualname__, args)
        proc = self.ctx.Process(
            target=runpy.run_path,
            args=(_BOOT_PATH, {_pe_boot.ARGS_GLOBAL: boot_args}, _pe_boot.RUN_NAME),
            name=name,
            daemon=True,
        )
        proc.start()
        return proc


def starter(env: Mapping[str, str | None] | None, capture: bool, packed_call: object) -> Starter:
    """How to start the processes of a launch with environment changes ``env``.

    Forked from the fork server when pytest runs with the plugin, the children's output goes to
    logs (``capture``), the call
    travels pickled (``packed_call`` is bytes: objects only multiprocessing can pass would be
    unpickled, importing their modules, before the boot sets the environment) and the environment
    differs from the server's only in variables that :func:`fork_safe` allows; spawned otherwise.
    """
    spawn = Starter(multiprocessing.get_context("spawn"), env, None)
    if not (capture and under_pytest_plugin() and _main_is_pytest() and isinstance(packed_call, bytes)):
        return spawn
    server_environ = _running_server_environ()
    if server_environ is None:
        return spawn
    with patched_environ(env):
        environ = dict(os.environ)
    changed = sorted(n for n in set(environ) | set(server_environ) if environ.get(n) != server_environ.get(n))
    unsafe = [name for name in changed if not fork_safe(name)]
    if unsafe:
        logger.debug("spawning: the environment differs from the fork server's in %s", ", ".join(unsafe))
        return spawn
    return Starter(multiprocessing.get_context("forkserver"), env, environ)


def _main_is_pytest() -> bool:
    """Whether ``__main__`` is pytest's (``pytest`` or ``python -m pytest``): the fork server
    imports it, or each child does before its boot runs, and pytest's imports read no variable a
    launch sets. Another script (one that imports mori, say) keeps its launches spawned."""
    main = sys.modules.get("__main__")
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:
        return bool(spec_name == "pytest.__main__")
    return Path(getattr(main, "__file__", None) or "").name in ("pytest", "py.test")


def _running_server_environ() -> dict[str, str] | None:
    """The environment the fork server started with, starting it first if needed (None: unusable)."""
    global _server_environ, _server_pid, _server_broken
    with _server_lock:
        if _server_broken:
            return None
        if _server_pid is not None:
            with _ENV_LOCK:  # a server that died is started again now, with the plain os.environ
                forkserver.ensure_running()
            if _server_pid == _current_server_pid() and _server_environ is not None:
                return _server_environ
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["__main__", *(m for m in PRELOAD_CANDIDATES if m in sys.modules)])
        with _ENV_LOCK:  # no launch is changing os.environ meanwhile: the server gets the plain one
            environ = dict(os.environ)
            started = _start_server(ctx, bounded_timeout(SERVER_START_LIMIT_S))
        if not started:
            _server_broken = True
            return None
        _server_environ, _server_pid = environ, _current_server_pid()
        return _server_environ


def _start_server(ctx: ForkServerContext, limit: float) -> bool:
    """Starts the fork server and waits (at most ``limit`` seconds) until it has forked a first
    process: its imports then count against no launch's timeout. False when it did not come up."""
    done = threading.Event()
    ok: list[bool] = []

    def probe() -> None:
        try:
            proc = ctx.Process(target=os.getpid, daemon=True)
            proc.start()  # returns once the server, its imports done, has forked it
            proc.join(limit)
            ok.append(proc.exitcode == 0)
        except Exception:
            logger.debug("the fork server did not start", exc_info=True)
        finally:
            done.set()

    # In a thread: Process.start() waits for the server without a timeout of its own.
    threading.Thread(target=probe, name="mori-forkserver-start", daemon=True).start()
    if done.wait(limit) and ok == [True]:
        logger.debug("fork server %s up", _current_server_pid())
        return True
    logger.warning("the fork server of mori.testing did not start within %.0f s: spawning PEs from now on", limit)
    pid = _current_server_pid()
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)  # the waiting probe reads EOF and ends
    return False


def _current_server_pid() -> int | None:
    """The pid of multiprocessing's fork server (None before it starts); a new pid means it restarted."""
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None
