# SPDX-License-Identifier: MIT
"""Mooncake Store beside mori-umbp in ``mori-umbp-bench``, as Mooncake's transfer engine is beside
mori-io in ``mori-io-bench``: optional (``--skip_mooncake``, or not installed: the JSON and the
table say why, never a number), and on the same workload through the same code.

``MooncakeStorePool`` starts ``mori.umbp.bench.mooncake_side`` in a new user and network
namespace (``unshare --user --map-root-user --net``, unprivileged), which runs Mooncake's master,
its storage nodes and the client that runs the workload; the bench talks to it over a socket
pair, which crosses the namespace. See mooncake_side.py for why a namespace.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import shutil
import socket
import subprocess
import sys
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mori.umbp import settings

#: The pip distributions that ship ``mooncake.store`` for a host without CUDA first.
DISTRIBUTIONS = ("mooncake-transfer-engine-non-cuda", "mooncake-transfer-engine", "mooncake-transfer-engine-cuda13")
NAME = "mooncake-store"
#: Seconds to wait for the namespace's pool to come up, and for one request's answer.
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 1800.0


def version() -> str | None:
    """``distribution==version`` of the installed Mooncake, or None."""
    for dist in DISTRIBUTIONS:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{dist}=={importlib.metadata.version(dist)}"
    return None


def unavailable_reason() -> str | None:
    """Why Mooncake Store cannot be measured here, or None when it can be tried."""
    if importlib.util.find_spec("mooncake") is None:
        return f"Mooncake is not installed (pip install {DISTRIBUTIONS[0]}, or mori-umbp[mooncake])"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not on PATH: no network namespace for Mooncake's address"
    return None


class MooncakeUnavailableError(RuntimeError):
    """Mooncake Store could not be started here; the message says why."""


class MooncakeStorePool:
    """Mooncake's master, ``peers`` storage nodes of ``peer_capacity`` bytes and a client, in a
    network namespace; ``ops_case`` and ``trace`` run the bench's workloads there."""

    def __init__(self, peers: int, peer_capacity: int) -> None:
        why = unavailable_reason()
        if why:
            raise MooncakeUnavailableError(why)
        self.version = version()
        # Mooncake's eviction watermark and KV lease are mori-umbp's high watermark and read lease.
        high_watermark = settings.get_float("UMBP_DRAM_HIGH_WM")
        lease_ms = settings.get_int("UMBP_DRAM_READ_LEASE_MS")
        self.logs = Path(tempfile.mkdtemp(prefix="mori-umbp-bench-mooncake-"))
        self._keep_logs = False  # an error named them: they stay for the reader
        ours, theirs = socket.socketpair()
        side = [sys.executable, "-m", "mori.umbp.bench.mooncake_side", "--fd", str(theirs.fileno())]
        argv = ["unshare", "--user", "--map-root-user", "--net", *side, "--peers", str(peers),
                "--peer-capacity", str(peer_capacity), "--high-watermark", str(high_watermark),
                "--lease-ms", str(lease_ms), "--log-dir", str(self.logs)]  # fmt: skip
        with open(self.logs / "side.log", "wb") as err:
            self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stderr=err)
        theirs.close()
        self.conn = Connection(ours.detach())
        try:
            self.info: dict[str, Any] = self._answer(START_TIMEOUT_S, "start")
        except BaseException:
            self.close()
            raise

    def _answer(self, timeout: float, what: str) -> Any:
        if not self.conn.poll(timeout):
            raise MooncakeUnavailableError(f"Mooncake Store did not answer {what} within {timeout:.0f}s{self._tail()}")
        try:
            status, body = self.conn.recv()
        except EOFError:
            self.proc.wait(10)
            raise MooncakeUnavailableError(
                f"Mooncake Store's process exited ({self.proc.returncode}) during {what}{self._tail()}"
            ) from None
        if status != "ok" and status != "ready":
            raise MooncakeUnavailableError(f"Mooncake Store {what}: {body}{self._tail()}")
        return body

    def _tail(self) -> str:
        """The last lines of the side's log (unshare's refusal shows up there)."""
        with contextlib.suppress(OSError):
            lines = (self.logs / "side.log").read_text(errors="replace").strip().splitlines()
            errors = [ln for ln in lines if not ln.startswith(("I", "W"))][-3:]
            if errors:
                self._keep_logs = True
                return " (" + " | ".join(errors) + f"; logs in {self.logs})"
        return ""

    def _call(self, cmd: str, **kw: Any) -> Any:
        self.conn.send((cmd, kw))
        return self._answer(REQUEST_TIMEOUT_S, cmd)

    def ops_case(self, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """``ops.run_case``'s arguments but the client and pool; (put, get) summaries."""
        put, get = self._call("ops", **kw)
        return put, get

    def trace(self, requests: list[list[str]], block_bytes: int, prepared: bool = False) -> Any:
        """``runner.replay`` of ``requests`` (``prepared``: --prepared-blocks); its ``Result``."""
        return self._call("trace", requests=requests, block_bytes=block_bytes, prepared=prepared)

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, MooncakeUnavailableError):
            if self.proc.poll() is None:
                self._call_stop()
        self.conn.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        if not self._keep_logs:
            shutil.rmtree(self.logs, ignore_errors=True)

    def _call_stop(self) -> None:
        self.conn.send(("stop", {}))
        self._answer(30, "stop")

    def __enter__(self) -> MooncakeStorePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def describe(pool: MooncakeStorePool | None, reason: str | None) -> dict[str, Any]:
    """The JSON's ``mooncake_store`` block: measured or why not, and what was measured."""
    if pool is None:
        return {"measured": False, "not_measured": reason, "version": version()}
    return {"measured": reason is None, "not_measured": reason, "version": pool.version, **pool.info}
