# SPDX-License-Identifier: MIT
"""The timing loop every transport shares: warm-up, then timed iterations on N threads."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: One iteration of one thread: posts a batch and waits for it; raises on failure.
Iteration = Callable[[], None]


@dataclass
class Point:
    """Results of one (transport, block size, batch size) measurement."""

    transport: str
    op: str
    block_size: int
    batch_size: int
    threads: int
    iterations: int
    seconds: float
    gbps: float  # GB/s, 1e9 bytes
    lat_us: float  # mean time of one iteration (a whole batch), microseconds
    lat_p50_us: float
    lat_p99_us: float
    lat_per_desc_us: float  # nixlbench's "avg latency": duration / (iterations x batch)


@dataclass
class Samples:
    """The raw timings of one transport at one point, gathered over one or more rounds."""

    iterations: int = 0  # per thread
    seconds: float = 0.0  # wall time of the timed parts, all threads running at once
    latencies: list[float] = field(default_factory=list)  # one per iteration of every thread

    def add(self, other: Samples) -> None:
        self.iterations += other.iterations
        self.seconds += other.seconds
        self.latencies.extend(other.latencies)


def time_iterations(iterations: list[Iteration], iters: int, warmup: int) -> Samples:
    """Runs ``warmup`` then ``iters`` iterations on every thread (one callable per thread)."""
    threads = len(iterations)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []
    start_line = threading.Barrier(threads)

    def work(index: int) -> None:
        step = iterations[index]
        try:
            for _ in range(warmup):
                step()
            start_line.wait()
            lat = latencies[index]
            begin = time.perf_counter()
            for _ in range(iters):
                t0 = time.perf_counter()
                step()
                lat.append(time.perf_counter() - t0)
            spans.append((begin, time.perf_counter()))
        except BaseException as exc:  # reported after join; the barrier must not strand the others
            errors.append(exc)
            start_line.abort()

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    # From the workers' own clocks: a coordinating thread that timed the run itself could wait
    # for the GIL until a worker that never gives it up (a transfer done before its wait) is done.
    seconds = max(end for _, end in spans) - min(begin for begin, _ in spans)
    return Samples(iters, seconds, [x for lat in latencies for x in lat])


def summarize(transport: str, op: str, block: int, batch: int, threads: int, samples: Samples) -> Point:
    """nixlbench's figures from the samples: bytes over wall time, and the iteration times."""
    flat = sorted(samples.latencies)
    total_bytes = block * batch * samples.iterations * threads
    return Point(
        transport=transport,
        op=op,
        block_size=block,
        batch_size=batch,
        threads=threads,
        iterations=samples.iterations,
        seconds=samples.seconds,
        gbps=total_bytes / 1e9 / samples.seconds,
        lat_us=statistics.fmean(flat) * 1e6,
        lat_p50_us=flat[len(flat) // 2] * 1e6,
        lat_p99_us=flat[min(len(flat) - 1, int(len(flat) * 0.99))] * 1e6,
        lat_per_desc_us=samples.seconds * 1e6 / (samples.iterations * batch),
    )


def measure(transport: str, op: str, block: int, batch: int, iterations: list[Iteration], iters: int,
            warmup: int) -> Point:  # fmt: skip
    """Runs ``warmup`` then ``iters`` iterations on every thread and summarizes them."""
    return summarize(transport, op, block, batch, len(iterations), time_iterations(iterations, iters, warmup))
