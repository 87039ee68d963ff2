# SPDX-License-Identifier: MIT
"""How the launchers start a child process: forked from a warm fork server, or spawned.

A spawned Python process imports everything its function needs afresh: torch alone takes 1-3 s of
CPU on a loaded 2-core CI machine, which made most of the time of a short multi-PE test. Under the
pytest plugin (and with pytest as ``__main__``), a launch instead forks its processes from
:mod:`multiprocessing`'s fork server, started once per test session with ``__main__`` (pytest's
script), the modules of :data:`PRELOAD_CANDIDATES` that the test process has itself imported
already and those the conftests name (``pytest_mori_preload``): every PE is still a process of
its own, started with those modules loaded (shared, copy-on-write). Outside pytest (benchmarks,
examples) launches are spawned as before.

What stays as it was with spawn:

- The environment. A forked process inherits the server's environment, not the launcher's. The
  PE's first code (:mod:`mori.testing._pe_boot`, run by path, so before any ``mori`` module is
  imported) makes its environment exactly the one a spawned PE would have started with. Modules
  the server imported read the server's environment, though: a launch whose environment differs
  from it in any variable those modules might read is spawned: every variable but those of
  :data:`FORK_SAFE_PREFIXES` (read only by mori's and jax's modules, which the server never
  imports) and :data:`FORK_SAFE_NAMES`.
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
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from multiprocessing import forkserver
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from mori.testing import _pe_boot
from mori.testing._logs import _ENV_LOCK, bounded_timeout, patched_environ, under_pytest_plugin

logger = logging.getLogger("mori.testing")

#: Modules the fork server imports when the launching process has imported them: costly to import,
#: and they read no variable a launch may change without falling back to spawn (none of
#: FORK_SAFE_PREFIXES, FORK_SAFE_NAMES).
PRELOAD_CANDIDATES = ("numpy", "torch")
#: The packages whose modules the fork server never imports (:func:`preload` refuses them), and
#: the prefixes of the variables only they read: these may differ between the server and a PE.
UNPRELOADABLE = ("mori", "jax", "jaxlib")
FORK_SAFE_PREFIXES = ("MORI_", "JAX_", "XLA_")
#: Variables whose value may also differ between the server and a forked PE: pytest sets
#: PYTEST_CURRENT_TEST for every test (nothing reads it at import); CUDA_MODULE_LOADING is read when
#: CUDA starts (the driver's cuInit, torch's lazy CUDA init), which happens in the PE, never in the
#: server (mori-ep's inter-node tests set it).
FORK_SAFE_NAMES = frozenset({"PYTEST_CURRENT_TEST", "CUDA_MODULE_LOADING"})
#: The longest a launch waits for the fork server to come up (its first start imports torch).
SERVER_START_LIMIT_S = 120.0

_BOOT_PATH = str(Path(_pe_boot.__file__).resolve())

_preload_asked: list[str] = []  # what the suite's conftests asked for (pytest_mori_preload)

_server_lock = threading.Lock()
_server_environ: dict[str, str] | None = None  # the environment the fork server started with
_server_pid: int | None = None
_server_probed = threading.Event()  # set once the server forked its first process, or failed to
_server_failed = False


def preload(modules: Iterable[str]) -> None:
    """Has the fork server, when it starts, also import ``modules`` (the pytest plugin passes what
    the conftests' ``pytest_mori_preload`` hooks name)."""
    for name in modules:
        if name.split(".")[0] in UNPRELOADABLE:
            raise ValueError(
                f"pytest_mori_preload named {name!r}: {', '.join(UNPRELOADABLE)} read the PE's settings "
                f"({', '.join(p + '*' for p in FORK_SAFE_PREFIXES)}) when imported; PEs import them themselves"
            )
        if name not in _preload_asked:
            _preload_asked.append(name)


def fork_safe(name: str) -> bool:
    """Whether no module the fork server imports reads the variable ``name``."""
    return name.startswith(FORK_SAFE_PREFIXES) or name in FORK_SAFE_NAMES


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
    """The environment the fork server started with, once it is ready to fork (None: not usable
    for this launch). The first call starts it and waits for its imports, within the test's time:
    before the launch's own timeout starts."""
    global _server_environ, _server_pid, _server_failed
    with _server_lock:
        if _server_failed:
            return None
        if _server_environ is None:
            ctx = multiprocessing.get_context("forkserver")
            imported = [m for m in PRELOAD_CANDIDATES if m in sys.modules]
            ctx.set_forkserver_preload(list(dict.fromkeys(["__main__", *imported, *_preload_asked])))
            with _ENV_LOCK:  # no launch is changing os.environ meanwhile: the server gets the plain one
                _server_environ = dict(os.environ)
                forkserver.ensure_running()
            _server_pid = _current_server_pid()
            threading.Thread(target=_probe, args=(ctx,), name="mori-forkserver-probe", daemon=True).start()
        elif _server_probed.is_set() and not _server_failed:
            with _ENV_LOCK:  # a server that died starts again here, with the plain os.environ of now
                forkserver.ensure_running()
                if _current_server_pid() != _server_pid:
                    _server_environ, _server_pid = dict(os.environ), _current_server_pid()
            return _server_environ
    limit = bounded_timeout(SERVER_START_LIMIT_S)
    if _server_probed.wait(limit) and not _server_failed:
        return _server_environ
    if _server_failed or limit >= SERVER_START_LIMIT_S:  # not just a test with little time left
        with _server_lock:
            _server_failed = True
        logger.warning("the fork server of mori.testing did not come up: spawning PEs from now on")
        pid = _current_server_pid()
        if pid is not None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    return None


def _probe(ctx: ForkServerContext) -> None:
    """Has the server fork a first process: Process.start() returns once the server's imports are
    done (it has no timeout of its own, hence this thread)."""
    global _server_failed
    try:
        proc = ctx.Process(target=os.getpid, daemon=True)
        proc.start()
        proc.join(SERVER_START_LIMIT_S)
        if proc.exitcode != 0:
            raise RuntimeError(f"its first process exited with {proc.exitcode}")
        logger.debug("fork server %s up", _current_server_pid())
    except Exception:
        logger.debug("the fork server did not start", exc_info=True)
        _server_failed = True
    finally:
        _server_probed.set()


def _current_server_pid() -> int | None:
    """The pid of multiprocessing's fork server (None before it starts); a new pid means it restarted."""
    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    return pid if isinstance(pid, int) else None
