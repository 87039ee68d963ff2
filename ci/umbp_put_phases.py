# SPDX-License-Identifier: MIT
"""Where a mori-umbp batch put's time goes (issue 36), phase by phase.

    .nox/test-umbp/bin/python ci/umbp_put_phases.py [--calls 30] [--block 2097152] [--batch 16]

Starts the ops bench's pool (a master and two peers, each a process of its own; mori.umbp.bench.pool)
and a client, then times ``--calls`` batch puts of ``--batch`` fresh blocks. The client's peer
calls (``rpc.start``/``rpc.call``) and mori-io transfers (``Mover.start_many``, ``Moving.wait``) are
wrapped to timestamp each phase from the call's start. Prints, per phase, the median of its first
and of its last occurrence in a call (several owners: several occurrences), beside the p50 of a
bare mori-io write of the same blocks to the pool process (the bench's ceiling), and the CPU time
one call took in the client and in the pool's processes (``/proc``, 10 ms ticks: give enough calls).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from mori.umbp import rpc
from mori.umbp.bench.cli import _client
from mori.umbp.bench.ops import Ceiling
from mori.umbp.bench.pool import PoolProcess
from mori.umbp.client import transfer

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

    def timed(method: Callable[..., Any], before: str, after: str) -> Callable[..., Any]:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            _mark(before)
            out = method(self, *args, **kwargs)
            _mark(after)
            return out

        return run

    rpc.start, rpc.call = start, call
    transfer.Mover.start_many = timed(transfer.Mover.start_many, "transfer start", "transfer started")  # type: ignore[method-assign]
    transfer.Moving.wait = timed(transfer.Moving.wait, "transfer wait", "transfer done")  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--block", type=int, default=2 << 20)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    block, batch = args.block, args.batch
    _instrument()
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
        for call in range(args.calls + 2):  # the first two warm connections and caches up
            if call == 2:
                cpu = [time.process_time(), pool.cpu_s()]
            _events.clear()
            _start[0] = time.perf_counter()
            stored = client.batch_put_from_ptr([f"phases-{call}-{j}" for j in range(batch)], ptrs, [block] * batch)
            total = time.perf_counter() - _start[0]
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
        bare = ceiling.measure(block, batch, args.calls)["write"]
    p50 = statistics.median(totals)
    lines = [
        f"batch put of {batch} x {block} B: p50 {p50 * 1e3:.2f} ms ({batch * block / p50 / 1e9:.2f} GB/s); "
        f"a bare mori-io write of the same blocks: p50 {bare['p50_ms']:.2f} ms",
        f"CPU per call: client {cpu[0] * 1e3:.2f} ms, pool (master and peers) {cpu[1] * 1e3:.2f} ms",
        f"{'phase':28s} {'first ms':>9s} {'last ms':>9s}",
    ]
    for name, occurrences in sorted(spans.items(), key=lambda kv: statistics.median(s[0] for s in kv[1])):
        first = statistics.median(s[0] for s in occurrences) * 1e3
        last = statistics.median(s[1] for s in occurrences) * 1e3
        lines.append(f"{name:28s} {first:9.2f} {last:9.2f}")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
