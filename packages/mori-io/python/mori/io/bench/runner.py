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
    lat_p90_us: float | None = None
    # CPU seconds each process spent per 1e9 bytes moved during the timed iterations (every
    # thread of the process, IO threads included); None where the side cannot be measured.
    cpu_s_per_gb_initiator: float | None = None
    cpu_s_per_gb_target: float | None = None


@dataclass
class Samples:
    """The raw timings of one transport at one point, gathered over one or more rounds."""

    iterations: int = 0  # per thread
    seconds: float = 0.0  # wall time of the timed parts, all threads running at once
    latencies: list[float] = field(default_factory=list)  # one per iteration of every thread
    cpu_initiator: float = 0.0  # process CPU seconds of this process over the timed parts
    cpu_target: float | None = 0.0  # the target process's; None once a round could not ask it

    def add(self, other: Samples) -> None:
        self.iterations += other.iterations
        self.seconds += other.seconds
        self.latencies.extend(other.latencies)
        self.cpu_initiator += other.cpu_initiator
        if self.cpu_target is None or other.cpu_target is None:
            self.cpu_target = None
        else:
            self.cpu_target += other.cpu_target


#: Reads a process's CPU seconds (user + system, all threads).
CpuClock = Callable[[], float]


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile ``q`` (0..1) of an ascending list."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def time_iterations(
    iterations: list[Iteration], iters: int, warmup: int, target_cpu: CpuClock | None = None
) -> Samples:
    """Runs ``warmup`` then ``iters`` iterations on every thread (one callable per thread).

    The CPU time of this process, and of the target through ``target_cpu``, is read when every
    thread has warmed up and again when all are done, so it covers the timed iterations only."""
    threads = len(iterations)
    latencies: list[list[float]] = [[] for _ in range(threads)]
    spans: list[tuple[float, float]] = []
    errors: list[BaseException] = []
    cpu_start: list[float | None] = [0.0, None]

    def read_cpu_at_start() -> None:
        cpu_start[0] = time.process_time()
        cpu_start[1] = target_cpu() if target_cpu else None

    start_line = threading.Barrier(threads, action=read_cpu_at_start)

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
    cpu_initiator = time.process_time() - (cpu_start[0] or 0.0)
    begin_target = cpu_start[1]
    cpu_target = target_cpu() - begin_target if target_cpu and begin_target is not None else None
    if errors:
        raise errors[0]
    # From the workers' own clocks: a coordinating thread that timed the run itself could wait
    # for the GIL until a worker that never gives it up (a transfer done before its wait) is done.
    seconds = max(end for _, end in spans) - min(begin for begin, _ in spans)
    return Samples(iters, seconds, [x for lat in latencies for x in lat], cpu_initiator, cpu_target)


def summarize(transport: str, op: str, block: int, batch: int, threads: int, samples: Samples) -> Point:
    """nixlbench's figures from the samples: bytes over wall time, and the iteration times."""
    flat = sorted(samples.latencies)
    total_bytes = block * batch * samples.iterations * threads
    gigabytes = total_bytes / 1e9
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
        lat_p99_us=percentile(flat, 0.99) * 1e6,
        lat_per_desc_us=samples.seconds * 1e6 / (samples.iterations * batch),
        lat_p90_us=percentile(flat, 0.90) * 1e6,
        cpu_s_per_gb_initiator=samples.cpu_initiator / gigabytes,
        cpu_s_per_gb_target=None if samples.cpu_target is None else samples.cpu_target / gigabytes,
    )


def measure(transport: str, op: str, block: int, batch: int, iterations: list[Iteration], iters: int,
            warmup: int) -> Point:  # fmt: skip
    """Runs ``warmup`` then ``iters`` iterations on every thread and summarizes them."""
    return summarize(transport, op, block, batch, len(iterations), time_iterations(iterations, iters, warmup))
