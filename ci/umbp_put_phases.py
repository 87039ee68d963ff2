# SPDX-License-Identifier: MIT
"""Where a mori-umbp batch put's time goes (issue 36), phase by phase.

    .nox/bench-umbp/bin/python ci/umbp_put_phases.py [--calls 30] [--block 2097152] [--batch 16] [--across]

Starts the ops bench's pool (a master and two peers, each a process of its own; mori.umbp.bench.pool)
and a client, then times ``--calls`` batch puts of ``--batch`` fresh blocks. The client's peer
calls (``rpc.start``/``rpc.call``) and mori-io transfers (``Mover.start_many``, ``Moving.wait``) are
wrapped to timestamp each phase from the call's start. Prints, per phase, the median of its first
and of its last occurrence in a call (several owners: several occurrences), beside the p50 of a
bare mori-io write of the same blocks to the pool process (the bench's ceiling), and the CPU time
one call took in the client and in the pool's processes (``/proc``, 10 ms ticks: give enough calls).

``--threads`` adds the CPU one call took in each thread of the client and of the pool's processes
(``/proc/<pid>/task``; a thread is named by its kernel name and id, or in the client by its Python
name), so the native work can start where the CPU goes.

``--across`` adds the stages in every process of the pool: each stamps, on the system-wide monotonic
clock, when a wire frame starts and ends being written (the client's calls, a peer's heartbeat),
when a wire server starts and ends serving a call (peers, master) and when a peer starts and ends
committing. The pool's spawned children import this module as their main module and install the
same stamps. Printed: each stage's median offset from the put's start, numbered by occurrence.
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import collections
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mori.umbp import rpc, wire
from mori.umbp.bench.cli import _client
from mori.umbp.bench.ops import Ceiling
from mori.umbp.bench.pool import PoolProcess
from mori.umbp.client import transfer
from mori.umbp.peer import service

#: ``--across``: where each process writes its stamps at exit (the pool's children inherit it).
_ACROSS_DIR = "UMBP_PUT_PHASES_DIR"
_stamps: list[tuple[str, int]] = []

_events: list[tuple[str, float]] = []
_start = [0.0]


def _mark(name: str) -> None:
    _events.append((name, time.perf_counter() - _start[0]))


def _instrument() -> None:
    started, called = rpc.start, rpc.call

    def start(what: str, *args: Any, **kwargs: Any) -> Any:
        name = what.split(" ")[0]
        _mark(f"{name} sent")
        pending = started(what, *args, **kwargs)
        answer: Callable[[], Any] = pending.result

        def result() -> Any:
            out = answer()
            _mark(f"{name} answered")
            return out

        pending.result = result  # type: ignore[method-assign]
        return pending

    def call(what: str, *args: Any, **kwargs: Any) -> Any:
        name = what.split(" ")[0]
        _mark(f"{name} called")
        out = called(what, *args, **kwargs)
        _mark(f"{name} answered")
        return out

    rpc.start, rpc.call = start, call
    _around(transfer.Mover, "start_many", _mark, lambda *_: "transfer start", lambda *_: "transfer started")
    _around(transfer.Moving, "wait", _mark, lambda *_: "transfer wait", lambda *_: "transfer done")


def _stamp(name: str) -> None:
    _stamps.append((name, time.monotonic_ns()))


def _around(
    owner: Any, attr: str, mark: Callable[[str], None], before: Callable[..., str], after: Callable[..., str]
) -> None:
    """Wraps ``owner.attr`` so that ``mark`` records ``before(*args)`` and ``after(*args)`` around it."""
    method = getattr(owner, attr)

    def wrapped(*args: Any) -> Any:
        mark(before(*args))
        out = method(*args)
        mark(after(*args))
        return out

    setattr(owner, attr, wrapped)


def _install_across() -> None:
    _around(wire._Connection, "send", _stamp, lambda _c, name, *_: f"write {name.decode()}", lambda *_: "written")
    _around(
        wire.WireServer, "_call", _stamp, lambda s, name, *_: f"{s.what}: serve {name}", lambda s, name, *_: "served"
    )
    _around(service.PeerServicer, "_commit_all", _stamp, lambda *_: "peer: commit", lambda *_: "committed")


def _dump_stamps() -> None:
    folder = os.environ.get(_ACROSS_DIR)
    if folder and _stamps:
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            json.dump(_stamps, f)


if os.environ.get(_ACROSS_DIR) and __name__ != "__main__":  # a child of the pool (its __mp_main__)
    _install_across()
    atexit.register(_dump_stamps)


def _across(folder: str, client_pid: int, master_pid: int) -> list[tuple[float, str]]:
    """Median offset of each stage from its put's start, over the puts the client stamped."""
    stamps = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name)) as f:
            stamps[int(name.split(".")[0])] = json.load(f)
    puts, start = [], None
    for name, t in stamps[client_pid]:
        if name == "PUT":
            start = t
        elif name == "END" and start is not None:
            puts.append((start, t))
            start = None
    role = {pid: "client" if pid == client_pid else "master" if pid == master_pid else "peer" for pid in stamps}
    events = sorted(
        (t, name if name.startswith(role[pid]) else f"{role[pid]}: {name}")
        for pid, rows in stamps.items()
        for name, t in rows
        if name not in ("PUT", "END")
    )
    times = [t for t, _ in events]
    offsets: dict[str, list[float]] = collections.defaultdict(list)
    for begin, end in puts:
        seen: collections.Counter[str] = collections.Counter()
        for t, name in events[bisect.bisect_left(times, begin) : bisect.bisect_right(times, end)]:
            seen[name] += 1
            offsets[f"{name} #{seen[name]}"].append((t - begin) / 1e3)
        offsets["client: put returns"].append((end - begin) / 1e3)
    return sorted((statistics.median(v), k) for k, v in offsets.items() if len(v) > len(puts) / 2)


def _thread_ticks(pids: dict[int, str]) -> dict[tuple[str, str], int]:
    """User plus system clock ticks of every thread of these processes, by (process role, thread):
    a thread is its kernel name and id, and in this process its Python name where it has one."""
    named = {t.native_id: t.name for t in threading.enumerate()}
    ticks: dict[tuple[str, str], int] = {}
    for pid, role in pids.items():
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    head, fields = f.read().rsplit(")", 1)
            except FileNotFoundError:  # ended meanwhile
                continue
            rest = fields.split()
            name = named.get(int(tid)) if pid == os.getpid() else None
            ticks[(role, name or f"{head.split('(', 1)[1]} {tid}")] = int(rest[11]) + int(rest[12])
    return ticks


def _bare_write_cpu(ceiling: Ceiling, pool: PoolProcess, block: int, batch: int, calls: int) -> tuple[float, float]:
    """The CPU seconds one bare mori-io write of ``batch`` blocks takes in this process and in the
    pool's (the ceiling's target is the first peer's process), over ``calls`` writes."""
    start = (time.process_time(), pool.cpu_s())
    ceiling.timed("write", block, [(ceiling.remote, batch)], calls)
    return (time.process_time() - start[0]) / calls, (pool.cpu_s() - start[1]) / calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--block", type=int, default=2 << 20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--across", action="store_true", help="the stages in every process of the pool too")
    parser.add_argument("--threads", action="store_true", help="the CPU per call of every thread, by process")
    args = parser.parse_args(argv)
    block, batch = args.block, args.batch
    _instrument()
    folder = tempfile.mkdtemp(prefix="umbp-put-phases-") if args.across else ""
    if folder:
        os.environ[_ACROSS_DIR] = folder
        _install_across()
    spans: dict[str, list[tuple[float, float]]] = {}
    totals: list[float] = []
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(PoolProcess(2, 1 << 30, min(block, 2 << 20), block * batch, "processes"))
        ceiling = Ceiling(pool, block * batch)
        stack.callback(ceiling.close)
        client = stack.enter_context(_client(pool.info.master, "put-phases", 0, min(block, 2 << 20), 4 << 20))
        src = np.random.default_rng(1).integers(0, 256, (batch, block), dtype=np.uint8)
        client.register_memory(src.ctypes.data, src.nbytes)
        ptrs = [int(src[j].ctypes.data) for j in range(batch)]
        cpu = [0.0, 0.0]  # this process's and the pool's CPU seconds over the timed calls
        roles = {os.getpid(): "client", pool.info.pids[0]: "master"}
        roles.update({pid: f"peer {i}" for i, pid in enumerate(pool.info.pids[1:])})
        ticks: dict[tuple[str, str], int] = {}
        for call in range(args.calls + 2):  # the first two warm connections and caches up
            if call == 2:
                cpu = [time.process_time(), pool.cpu_s()]
                ticks = _thread_ticks(roles) if args.threads else {}
            keys = [f"phases-{call}-{j}" for j in range(batch)]
            _events.clear()
            if call >= 2:
                _stamp("PUT")
            _start[0] = time.perf_counter()
            stored = client.batch_put_from_ptr(keys, ptrs, [block] * batch)
            total = time.perf_counter() - _start[0]
            if call >= 2:
                _stamp("END")
            if not all(stored):
                raise RuntimeError(f"call {call}: {stored.count(False)} of {batch} blocks not stored")
            if call < 2:
                continue
            totals.append(total)
            seen: dict[str, list[float]] = {}
            for name, at in _events:
                seen.setdefault(name, []).append(at)
            for name, ats in seen.items():
                spans.setdefault(name, []).append((min(ats), max(ats)))
        cpu = [(time.process_time() - cpu[0]) / args.calls, (pool.cpu_s() - cpu[1]) / args.calls]
        if args.threads:
            after = _thread_ticks(roles)
            per_call = {k: (v - ticks.get(k, 0)) / os.sysconf("SC_CLK_TCK") / args.calls for k, v in after.items()}
        bare = ceiling.measure(block, batch, args.calls)["write"]
        bare_cpu = _bare_write_cpu(ceiling, pool, block, batch, args.calls)
        master_pid = pool.info.pids[0]
    p50 = statistics.median(totals)
    lines = [
        f"batch put of {batch} x {block} B: p50 {p50 * 1e3:.2f} ms ({batch * block / p50 / 1e9:.2f} GB/s); "
        f"a bare mori-io write of the same blocks: p50 {bare['p50_ms']:.2f} ms",
        f"CPU per call: client {cpu[0] * 1e3:.2f} ms, pool (master and peers) {cpu[1] * 1e3:.2f} ms; "
        f"the bare write's: {bare_cpu[0] * 1e3:.2f} ms, {bare_cpu[1] * 1e3:.2f} ms",
        f"{'phase':28s} {'first ms':>9s} {'last ms':>9s}",
    ]
    for name, occurrences in sorted(spans.items(), key=lambda kv: statistics.median(s[0] for s in kv[1])):
        first = statistics.median(s[0] for s in occurrences) * 1e3
        last = statistics.median(s[1] for s in occurrences) * 1e3
        lines.append(f"{name:28s} {first:9.2f} {last:9.2f}")
    if args.threads:
        lines.append("CPU per call by thread (ms):")
        rows = sorted(((v, k) for k, v in per_call.items() if v > 0), reverse=True)
        lines += [f"{v * 1e3:8.3f}  {role}: {name}" for v, (role, name) in rows]
    if folder:  # the pool's children wrote their stamps when they stopped
        _dump_stamps()
        lines.append("across the processes, median offset from the put's start:")
        lines += [f"{at:8.0f} us  {name}" for at, name in _across(folder, os.getpid(), master_pid)]
        shutil.rmtree(folder)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
