# SPDX-License-Identifier: MIT
"""A mori-umbp batch put's stages across its four processes (issue 36): client, two peers, master.

    .nox/bench-umbp/bin/python ci/umbp_put_timeline.py [--calls 3000] [--block 65536] [--batch 4]

Starts the ops bench's pool (a master and two peers, each a process of its own) and a client, then
makes ``--calls`` batch puts of ``--batch`` fresh blocks. Every process stamps, on the system-wide
monotonic clock, when a wire frame starts and ends being written (client, and a peer's heartbeat),
when a wire server starts and ends serving a call (peers, master), and when a peer starts and ends
committing; this module is imported by the pool's spawned children as their main module, so they
install the same stamps. Prints each stage's median offset from the put's start over the calls
after the first tenth (numbered by occurrence: two owners give two of most stages).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from mori.umbp import wire
from mori.umbp.peer import service

#: Where each process writes its stamps at exit (set by the parent; the children inherit it).
_DIR_ENV = "UMBP_TIMELINE_DIR"
_stamps: list[tuple[str, int]] = []


def _stamp(name: str) -> None:
    _stamps.append((name, time.monotonic_ns()))


def _around(owner: Any, attr: str, before: Callable[..., str], after: Callable[..., str]) -> None:
    method = getattr(owner, attr)

    def wrapped(*args: Any) -> Any:
        _stamp(before(*args))
        out = method(*args)
        _stamp(after(*args))
        return out

    setattr(owner, attr, wrapped)


def _dump() -> None:
    folder = os.environ.get(_DIR_ENV)
    if folder and _stamps:
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as f:
            json.dump(_stamps, f)


def _install() -> None:
    _around(wire._Connection, "send", lambda _c, name, *_: f"write {name.decode()}", lambda *_: "written")
    _around(wire.WireServer, "_call", lambda s, name, *_: f"{s.what}: serve {name}", lambda s, name, *_: "served")
    _around(service.PeerServicer, "_commit_all", lambda *_: "peer: commit", lambda *_: "committed")


if os.environ.get(_DIR_ENV):  # in the pool's children as in the parent
    _install()
    import atexit

    atexit.register(_dump)


def _timeline(folder: str, client_pid: int, master_pid: int, skip: float) -> list[tuple[float, str]]:
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
    puts = puts[int(len(puts) * skip) :]
    role = {pid: "client" if pid == client_pid else "master" if pid == master_pid else "peer" for pid in stamps}
    events = sorted(
        (t, f"{role[pid]}: {name}" if not name.startswith(role[pid]) else name)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--block", type=int, default=64 << 10)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args(argv)
    import numpy as np

    from mori.umbp.bench.cli import _client
    from mori.umbp.bench.pool import PoolProcess

    block, batch = args.block, args.batch
    with tempfile.TemporaryDirectory() as folder:
        os.environ[_DIR_ENV] = folder
        _install()
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(PoolProcess(2, 1 << 30, min(block, 2 << 20), 0, "processes"))
            client = stack.enter_context(_client(pool.info.master, "put-timeline", 0, min(block, 2 << 20), 4 << 20))
            src = np.random.default_rng(1).integers(0, 256, (batch, block), dtype=np.uint8)
            client.register_memory(src.ctypes.data, src.nbytes)
            ptrs = [int(src[j].ctypes.data) for j in range(batch)]
            for call in range(args.calls):
                keys = [f"timeline-{call}-{j}" for j in range(batch)]
                _stamp("PUT")
                stored = client.batch_put_from_ptr(keys, ptrs, [block] * batch)
                _stamp("END")
                if not all(stored):
                    raise RuntimeError(f"call {call}: {stored.count(False)} of {batch} blocks not stored")
            master_pid = pool.info.pids[0]
        _dump()  # the pool's children wrote theirs when they stopped
        rows = _timeline(folder, os.getpid(), master_pid, 0.1)
    sys.stdout.write(f"batch put of {batch} x {block} B, median offset from the put's start:\n")
    sys.stdout.write("".join(f"{at:8.0f} us  {name}\n" for at, name in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
