# SPDX-License-Identifier: MIT
"""``mori-shmem-bench``: host put/get bandwidth and signal latency between local PEs.

Every PE puts to (and gets from) its right neighbour at once, so the figure is the aggregate of
all PEs, reported beside a memcpy ceiling measured in the same run (numpy copying the same
sizes within one process). Latency is half the round trip of an 8-byte put-with-signal ping-pong
between PE 0 and PE 1.

``--remote`` measures the remote transport instead (bench/remote.py): 2 PEs on the cpu backend
with ``MORI_DISABLE_P2P=1`` and the conduit ``--conduit`` names, beside a plain TCP socket copy.
``--device-proxy`` (bench/proxy.py) measures kernels reaching a PE of another node through the
device proxy, on the GPU.
Through nox, arguments go after ``--``::

    nox -s bench-shmem -- --remote                       # 4 KiB .. 256 MiB, the auto conduit
    nox -s bench-shmem -- --remote --conduit ucx --max-size 16M --json remote-ucx.json
    mori-shmem-bench --remote --conduit tcp --streams 4  # where the wheel is installed
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mori.bench_report import Column, add_json, add_world_size, progress, size_ladder, table, write_json
from mori.shmem import api

logger = logging.getLogger("mori.shmem.bench")

DEFAULT_SCOPES = "thread,warp,block"
_TARGET_BYTES_PER_SIZE = 256 << 20  # bytes moved per measured size (bounds the time per size)


def _iterations(size: int) -> int:
    return max(5, min(20000, _TARGET_BYTES_PER_SIZE // max(size, 1)))


def _timed(fn: Any, iterations: int) -> float:
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    api.shmem_quiet()
    return time.perf_counter() - start


def require_two_pes(args: argparse.Namespace, mode: str, why: str = "") -> None:
    """``mode`` times PE 0 against PE 1: any other ``--world-size`` is refused."""
    if args.pes != 2:
        raise SystemExit(f"{mode} measures 2 PEs{why}; leave --world-size at 2")


def _pe_buffers(rank: int, largest: int) -> tuple[int, int, Any, Any]:
    """(symmetric buffer of ``largest`` bytes, 8-byte signal, ``largest`` random bytes, as many
    scratch bytes) of a PE; the two arrays must stay referenced while their addresses are in use."""
    heap_buf = api.shmem_malloc(largest)
    signal = api.shmem_malloc(8)
    local = np.random.default_rng(rank).integers(0, 255, size=largest, dtype=np.uint8)
    return heap_buf, signal, local, np.empty_like(local)


def _pe_program(rank: int, nranks: int, uid: bytes, sizes: list[int], pingpongs: int) -> dict[str, Any]:
    api.shmem_init_attr(api.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)
    heap_buf, signal, local, scratch = _pe_buffers(rank, max(sizes))
    src, dst = local.ctypes.data, scratch.ctypes.data
    peer = (rank + 1) % nranks
    rows = []
    for index, size in enumerate(sizes):
        iterations = _iterations(size)
        # Warm up pages and caches before timing.
        api.shmem_putmem(heap_buf, src, size, peer)
        api.shmem_barrier_all()
        put_s = _timed(lambda size=size: api.shmem_putmem(heap_buf, src, size, peer), iterations)
        api.shmem_barrier_all()
        get_s = _timed(lambda size=size: api.shmem_getmem(dst, heap_buf, size, peer), iterations)
        api.shmem_barrier_all()
        copy_s = _timed(lambda size=size: ctypes.memmove(dst, src, size), iterations)
        rows.append({"size": size, "iterations": iterations, "put_s": put_s, "get_s": get_s, "memcpy_s": copy_s})
        if rank == 0:
            progress(f"{size} B", index + 1, len(sizes))
    latencies = _pingpong(rank, nranks, heap_buf, signal, src, pingpongs)
    api.shmem_barrier_all()
    api.shmem_finalize()
    return {"rows": rows, "latency_s": latencies}


def _pingpong(rank: int, nranks: int, heap_buf: int, signal: int, src: int, rounds: int) -> list[float]:
    """Half round trips of an 8-byte put-with-signal between PE 0 and PE 1."""
    api.shmem_signal_op(signal, 0, api.AmoType.SIGNAL_SET, rank)
    api.shmem_barrier_all()
    if rank > 1 or nranks < 2:
        return []
    samples = []
    peer = 1 - rank
    for round_index in range(1, rounds + 1):
        start = time.perf_counter()
        if rank == 0:
            api.shmem_putmem_signal(heap_buf, src, 8, signal, round_index, api.AmoType.SIGNAL_SET, peer)
            api.shmem_wait_until(signal, api.CmpOp.GE, round_index)
        else:
            api.shmem_wait_until(signal, api.CmpOp.GE, round_index)
            api.shmem_putmem_signal(heap_buf, src, 8, signal, round_index, api.AmoType.SIGNAL_SET, peer)
        samples.append((time.perf_counter() - start) / 2)
    return samples


def _summarize(per_pe: list[dict[str, Any]], sizes: list[int]) -> list[dict[str, float]]:
    summary = []
    for index, size in enumerate(sizes):
        rows = [pe["rows"][index] for pe in per_pe]
        moved = size * rows[0]["iterations"]
        summary.append(
            {
                "size_bytes": size,
                # Aggregate over PEs: every PE moves `moved` bytes in its own time.
                "put_GBps": sum(moved / row["put_s"] for row in rows) / 1e9,
                "get_GBps": sum(moved / row["get_s"] for row in rows) / 1e9,
                "memcpy_GBps": sum(moved / row["memcpy_s"] for row in rows) / 1e9,
                "put_us": statistics.median(row["put_s"] / row["iterations"] for row in rows) * 1e6,
            }
        )
    return summary


_CPU_COLUMNS = (
    Column("size", 10), Column("put GB/s", 10, ".2f"), Column("get GB/s", 10, ".2f"), Column("memcpy GB/s", 12, ".2f"),
    Column("put/memcpy", 11, ".0%"), Column("put us", 9, ".2f"),
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mori-shmem-bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--backend",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="cuda: device-initiated puts from kernels; cpu: host puts (auto: cuda when a GPU is present)",
    )
    parser.add_argument(
        "--remote",
        action="store_true",
        help="the remote transport: 2 cpu PEs with MORI_DISABLE_P2P=1, beside a plain TCP socket copy",
    )
    parser.add_argument(
        "--device-proxy",
        action="store_true",
        help="kernels putting to a PE on another node through the device proxy (2 cuda PEs, "
        "MORI_SHMEM_PES_PER_NODE=1), beside a plain TCP socket copy",
    )
    parser.add_argument(
        "--conduit",
        choices=["auto", "tcp", "ucx"],
        default="auto",
        help="--remote, --device-proxy: MORI_SHMEM_REMOTE_CONDUIT, what carries the remote transport",
    )
    parser.add_argument(
        "--streams", type=int, default=None, help="--remote: MORI_SHMEM_REMOTE_STREAMS (tcp; default: the transport's)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="--remote: rounds, each timing every size over the transport, then the socket copy; the best counts",
    )
    add_world_size(parser, 2, "local PEs (processes)", aliases=("--pes",), dest="pes")
    parser.add_argument("--min-size", type=api.parse_size, default=None, help="default 8 (4K with --remote)")
    parser.add_argument(
        "--max-size", type=api.parse_size, default=None, help="default 64M (cpu), 256M (cuda, --remote)"
    )
    parser.add_argument("--pingpongs", type=int, default=None, help="default 2000 (cpu), 10000 (cuda)")
    parser.add_argument("--scopes", default=DEFAULT_SCOPES, help="cuda: scopes of the device put")
    parser.add_argument("--no-peer", action="store_true", help="cuda: skip the NVSHMEM comparison")
    add_json(parser, Path("mori-shmem-bench.json"), aliases=("--output",), dest="output")
    parser.add_argument("--timeout", type=float, default=1200.0)
    args = parser.parse_args(argv)
    if args.pes < 2:
        parser.error(f"--world-size={args.pes}: the benchmark needs at least 2 PEs")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.remote:
        from mori.shmem.bench.remote import main_remote

        return main_remote(args)
    if args.device_proxy:
        from mori.shmem.bench.proxy import main_device_proxy

        return main_device_proxy(args)
    if args.min_size is None:
        args.min_size = 8
    backend = args.backend
    if backend == "auto":
        from mori.shmem.device import shmem_cuda_available

        backend = "cuda" if shmem_cuda_available() else "cpu"
    if backend == "cuda":
        return _main_cuda(args)

    from mori.shmem.testing import run_pes

    sizes = size_ladder(args.min_size, args.max_size or 64 << 20)
    heap = max(sizes) + (16 << 20)
    per_pe = run_pes(
        _pe_program,
        args.pes,
        sizes,
        args.pingpongs or 2000,
        timeout=args.timeout,
        env={"MORI_SHMEM_HEAP_SIZE": str(heap), "MORI_SHMEM_BACKEND": "cpu"},
    )
    summary = _summarize(per_pe, sizes)
    latencies = per_pe[0]["latency_s"]
    latency_us = statistics.median(latencies) * 1e6

    cells = [
        (row["size_bytes"], row["put_GBps"], row["get_GBps"], row["memcpy_GBps"], row["put_GBps"] / row["memcpy_GBps"],
         row["put_us"])
        for row in summary
    ]  # fmt: skip
    lines = [
        f"mori-shmem-bench: {args.pes} PEs, cpu backend, aggregate over PEs",
        *table(_CPU_COLUMNS, cells, rule=False),
    ]
    lines.append(f"8-byte put-with-signal latency (half round trip, median of {len(latencies)}): {latency_us:.2f} us")
    sys.stdout.write("\n".join(lines) + "\n")

    report = {
        "benchmark": "mori-shmem-bench",
        "backend": "cpu",
        "pes": args.pes,
        "host": platform.node(),
        "rows": summary,
        "latency_us_median": latency_us,
        "latency_us_p99": float(np.percentile(np.array(latencies), 99)) * 1e6,
    }
    write_json(args.output, report)
    logger.info("wrote %s", args.output)
    return 0


def _main_cuda(args: argparse.Namespace) -> int:
    from mori.shmem.bench import gpu as bench_gpu
    from mori.shmem.settings import setting
    from mori.shmem.testing import run_pes

    sizes = size_ladder(args.min_size, args.max_size or 256 << 20, factor=8)
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    unknown = sorted(set(scopes) - set(bench_gpu.SCOPES))
    if unknown:
        raise SystemExit(f"--scopes: unknown scope(s) {unknown}; choose from {sorted(bench_gpu.SCOPES)}")
    pingpongs = args.pingpongs or 10000
    heap = 2 * max(sizes) + (64 << 20)
    env = {"MORI_SHMEM_HEAP_SIZE": str(heap), "MORI_SHMEM_BACKEND": "cuda"}
    per_pe = run_pes(bench_gpu.pe_program, args.pes, sizes, scopes, pingpongs, timeout=args.timeout, env=env)
    cache = setting("MORI_JIT_CACHE_DIR") or str(Path.home() / ".cache" / "mori" / "jit")
    peer = {"error": "--no-peer"} if args.no_peer else bench_gpu.nvshmem_peer(args.pes, sizes, scopes, pingpongs, cache)
    text, document = bench_gpu.report(per_pe, peer, args.pes, scopes)
    sys.stdout.write(text + "\n")
    document["host"] = platform.node()
    write_json(args.output, document)
    logger.info("wrote %s", args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
