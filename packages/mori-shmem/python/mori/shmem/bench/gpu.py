# SPDX-License-Identifier: MIT
"""``mori-shmem-bench --backend cuda``: device-initiated put bandwidth and latency between PEs.

Every PE puts one message to its right neighbour from a kernel (one put per launch, split over
the grid at thread, warp or block scope), timed with CUDA events after a warm-up; the aggregate
over PEs is reported beside a device-to-device copy of the same sizes measured in the same run by
the same PEs at the same time (torch ``copy_``), which is the ceiling a put can reach (both read
and write every byte once). Latency is half the round trip of an 8-byte put-with-signal between
two PEs' kernels. Where NVSHMEM is installed (nvidia-nvshmem-cu13) the same measurements run with
it, in the same session, for comparison.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any

from mori.bench_report import Column, header, optional
from mori.bench_report import row as table_row

logger = logging.getLogger("mori.shmem.bench")

SCOPES = {"thread": 0, "warp": 1, "block": 2}
THREADS_PER_BLOCK = 512
WARPS_PER_BLOCK = THREADS_PER_BLOCK // 32
# Smallest slice one caller of each scope gets; below it fewer callers take part.
MIN_SLICE = {"thread": 256, "warp": 4096, "block": 32768}
# Largest slice of warp and block callers. Block scope has one block per slice, so a large message
# runs as a copy kernel does, blocks starting as others finish (on an H200 at 256 MiB: 97-103 % of
# the copy, against 94 % for two blocks per SM taking every grid-th slice). Warp scope keeps a grid
# of BLOCKS_PER_SM blocks per SM taking its 8 KiB slices grid-stride (a warp per slice measured 85-89 %:
# its deeper copy holds 128 registers a thread, one 512-thread block per SM, so short-lived blocks
# leave their SM idle while the next one starts).
MAX_SLICE = {"thread": 1 << 40, "warp": 8 << 10, "block": 128 << 10}
PER_SLICE_GRID = {"thread": False, "warp": False, "block": True}
BLOCKS_PER_SM = 2
_TARGET_BYTES_PER_SIZE = 4 << 30


@dataclass(frozen=True)
class Geometry:
    """How one message of ``size`` bytes is split: ``workers`` callers of ``slice`` bytes each."""

    workers: int
    slice: int
    blocks: int
    threads: int


def geometry(scope: str, size: int, sm_count: int) -> Geometry:
    """``workers`` slices of ``slice`` bytes: as many as BLOCKS_PER_SM blocks per SM have callers, of at
    least MIN_SLICE bytes, and more where slices would exceed MAX_SLICE; a grid of at most
    BLOCKS_PER_SM blocks per SM takes them grid-stride, or one caller each (PER_SLICE_GRID)."""
    per_block = {"thread": THREADS_PER_BLOCK, "warp": WARPS_PER_BLOCK, "block": 1}[scope]
    max_blocks = BLOCKS_PER_SM * sm_count
    workers = max(1, min(max_blocks * per_block, size // MIN_SLICE[scope]))
    slice_bytes = -(-size // workers)
    slice_bytes = min(MAX_SLICE[scope], -(-slice_bytes // 16) * 16)  # whole 16-byte vectors, except the last
    workers = -(-size // slice_bytes)
    blocks = -(-workers // per_block)
    return Geometry(
        workers, slice_bytes, blocks if PER_SLICE_GRID[scope] else min(max_blocks, blocks), THREADS_PER_BLOCK
    )


def iterations(size: int) -> int:
    return max(10, min(2000, _TARGET_BYTES_PER_SIZE // max(size, 1)))


def reps(size: int) -> int:
    """Puts per launch: enough bytes per launch (64 MiB) that the put, not the launch, is timed."""
    return max(1, min(64, (64 << 20) // max(size, 1)))


#: Below this the copy is launch-bound (one per launch) or served from the 60 MB L2, so it is no
#: ceiling of a put to HBM there.
CEILING_FROM_BYTES = 128 << 20


def kernel_spec(scope: str) -> Any:
    """The bench kernels for one scope, as registered for ``mori-jit precompile``."""
    from mori.shmem import jit

    return jit.KernelSpec(
        f"bench_kernels_{scope}",
        jit.source_dir() / "bench_kernels.cu",
        defines={"MORI_BENCH_SCOPE": SCOPES[scope]},
        include_dirs=(jit.include_dir(),),
    )


def jit_kernels() -> list[Any]:
    """The benchmark's kernels, one variant per scope (entry point ``mori-shmem-bench`` of
    ``mori.jit_kernels``, for ``mori-jit precompile``)."""
    return [kernel_spec(scope) for scope in SCOPES]


def _load(scope: str) -> Any:
    return kernel_spec(scope).load()


def pe_program(
    rank: int, nranks: int, uid: bytes, sizes: list[int], scopes: list[str], pingpongs: int, bytes_per_size: int = 0
) -> dict[str, Any]:
    """One PE of the benchmark (spawned by run_pes); returns its timings. ``bytes_per_size`` > 0
    caps what each size moves (one put per launch), for transports far slower than the GPU."""
    import torch

    import mori.shmem as shmem

    shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)
    torch.cuda.set_device(shmem.shmem_cuda_device())
    state = shmem.shmem_device_state()
    from mori.shmem.torch_tensors import mori_shmem_create_tensor

    largest = max(sizes)
    dest_t = mori_shmem_create_tensor([largest], torch.uint8)
    src_t = mori_shmem_create_tensor([largest], torch.uint8)
    dest, src = dest_t.data_ptr(), src_t.data_ptr()
    src_t.copy_(_pattern(rank, largest, torch))
    signal = shmem.shmem_malloc(8)
    copy_src = torch.empty(largest, dtype=torch.uint8, device="cuda")
    copy_dst = torch.empty_like(copy_src)
    sm_count = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    if bytes_per_size:
        # Each PE stands for a node with a GPU of its own: its grid is what its share of this GPU's
        # SMs holds at once. A grid sized for the whole GPU runs in waves beside the other PEs' grids,
        # and a block waiting in its quiet for the proxy holds back the launch of the next wave,
        # which measures the GPU's sharing, not the proxy (docs/benchmarks/shmem.md).
        sm_count = max(1, sm_count // pes_sharing_the_gpu(rank, nranks, torch.cuda.device_count()))
    stream = torch.cuda.current_stream()
    peer = (rank + 1) % nranks
    peer_of_me = (rank - 1) % nranks  # whose puts land in this PE's dest
    rows: list[dict[str, Any]] = []

    timed = functools.partial(timed_launches, stream=stream)

    for scope in scopes:
        kernel = _load(scope).function("mori_bench_put")
        for size in sizes:
            geo = geometry(scope, size, sm_count)
            per_launch = 1 if bytes_per_size else reps(size)
            count = max(3, min(iterations(size), bytes_per_size // size)) if bytes_per_size else iterations(size)
            args = [state, ctypes.c_uint64(dest), ctypes.c_uint64(src), ctypes.c_uint64(size),
                    ctypes.c_uint64(geo.slice), ctypes.c_int32(geo.workers), ctypes.c_int32(peer),
                    ctypes.c_int32(per_launch)]  # fmt: skip
            launch = functools.partial(kernel.launch, geo.blocks, geo.threads, args, stream=stream)
            dest_t.zero_()
            put_s = timed(launch, count) / per_launch
            _verify(shmem, dest_t, size, peer_of_me, torch, f"{scope}-scope puts of {size} B")
            rows.append({"scope": scope, "size": size, "iterations": count, "reps": per_launch, "put_s": put_s,
                         "verified": True, **geo.__dict__})  # fmt: skip
    if bytes_per_size:
        for row in _host_puts(shmem, dest, src, sizes, peer, bytes_per_size):
            dest_t.zero_()
            shmem.shmem_barrier_all()
            shmem.shmem_putmem(dest, src, row["size"], peer)
            shmem.shmem_quiet()
            _verify(shmem, dest_t, row["size"], peer_of_me, torch, f"host puts of {row['size']} B")
            rows.append({**row, "verified": True})
    for size in sizes:
        a, b = copy_src[:size], copy_dst[:size]
        copy_s = timed(lambda a=a, b=b: b.copy_(a), iterations(size))
        rows.append({"scope": "copy", "size": size, "iterations": iterations(size), "put_s": copy_s})

    latency_s = _pingpong(shmem, state, rank, nranks, src, signal, pingpongs, stream)
    shmem.shmem_check_device_error()
    shmem.shmem_barrier_all()
    shmem.shmem_finalize()
    return {"rows": rows, "latency_s": latency_s, "sm_count": sm_count}


def pes_sharing_the_gpu(rank: int, nranks: int, devices: int) -> int:
    """PEs on ``rank``'s GPU under the default placement (MORI_SHMEM_DEVICE unset: rank % devices)."""
    return sum(1 for other in range(nranks) if other % devices == rank % devices)


def _pattern(rank: int, nbytes: int, torch: Any) -> Any:
    """What PE ``rank`` puts: bytes that differ between PEs and along the buffer."""
    return ((torch.arange(nbytes, device="cuda", dtype=torch.int64) * (2 * rank + 3) + rank) % 251).to(torch.uint8)


def _verify(shmem: Any, dest: Any, size: int, writer: int, torch: Any, what: str) -> None:
    """Every byte that ``writer`` put into ``dest`` arrived (after the writer's quiet: a barrier)."""
    torch.cuda.synchronize()
    shmem.shmem_barrier_all()
    expected = _pattern(writer, size, torch)
    wrong = int((dest[:size] != expected).sum().item())
    if wrong:
        raise RuntimeError(f"{what} from PE {writer}: {wrong} of {size} bytes did not arrive as sent")
    shmem.shmem_barrier_all()


def _host_puts(
    shmem: Any, dest: int, src: int, sizes: list[int], peer: int, bytes_per_size: int
) -> list[dict[str, Any]]:
    """The same puts issued by the host (``shmem_putmem`` + ``shmem_quiet`` per put) through the
    remote conduit: the device proxy's ceiling, since it drives the same conduit. Scope "conduit"."""
    rows: list[dict[str, Any]] = []
    for size in sizes:
        count = max(3, min(iterations(size), bytes_per_size // size))
        shmem.shmem_putmem(dest, src, size, peer)  # warm-up: connections, staging lanes
        shmem.shmem_quiet()
        shmem.shmem_barrier_all()
        start = time.perf_counter()
        for _ in range(count):
            shmem.shmem_putmem(dest, src, size, peer)
            shmem.shmem_quiet()
        rows.append(
            {"scope": "conduit", "size": size, "iterations": count, "put_s": (time.perf_counter() - start) / count}
        )
    return rows


#: Launches before each timed batch (first-launch costs, caches, clocks).
WARMUP_LAUNCHES = 3


def timed_launches(launch: Any, count: int, *, stream: Any) -> float:
    """Seconds per launch of ``launch``: WARMUP_LAUNCHES launches, then every PE starts together
    (device sync and barrier) and ``count`` launches are timed with CUDA events on ``stream``."""
    import torch

    import mori.shmem as shmem

    for _ in range(WARMUP_LAUNCHES):
        launch()
    torch.cuda.synchronize()
    shmem.shmem_barrier_all()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(stream)
    for _ in range(count):
        launch()
    end.record(stream)
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e-3 / count


def _pingpong(shmem: Any, state: Any, rank: int, nranks: int, buf: int, signal: int, rounds: int, stream: Any) -> float:
    import torch

    kernel = _load("thread").function("mori_bench_pingpong")
    elapsed = torch.zeros(1, dtype=torch.int64, device="cuda")
    shmem.shmem_barrier_all()
    if rank < 2 and nranks >= 2:
        args = [state, ctypes.c_uint64(buf), ctypes.c_uint64(signal), ctypes.c_uint64(8), ctypes.c_int32(1 - rank),
                ctypes.c_int32(rounds), ctypes.c_int32(1 if rank == 0 else 0), elapsed]  # fmt: skip
        kernel.launch(1, 32, args, stream=stream)
        stream.synchronize()
    shmem.shmem_barrier_all()
    return float(elapsed.item()) * 1e-9 / (2 * rounds) if rank == 0 else math.nan


def summarize(per_pe: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Aggregate GB/s over PEs for every (scope, size); copy rows give the ceiling."""
    table: dict[tuple[str, int], dict[str, Any]] = {}
    for pe in per_pe:
        for row in pe["rows"]:
            key = (row["scope"], row["size"])
            entry = table.setdefault(key, {"scope": row["scope"], "size_bytes": row["size"], "GBps": 0.0, "us": []})
            entry["GBps"] += row["size"] / row["put_s"] / 1e9
            entry["us"].append(row["put_s"] * 1e6)
    out = []
    for entry in table.values():
        entry["us"] = statistics.median(entry["us"])
        out.append(entry)
    return out


def nvshmem_peer(nranks: int, sizes: list[int], scopes: list[str], pingpongs: int, cache_dir: str) -> dict[str, Any]:
    """The same measurements with NVSHMEM, split the same way; {"error": reason} when it cannot run."""
    from pathlib import Path

    from mori.shmem.bench import nvshmem

    install, reason = nvshmem.locate_nvshmem()
    if install is None:
        return {"error": reason}
    try:
        binary = nvshmem.build(install, Path(cache_dir))
        split = [
            "--min-slice", ",".join(str(MIN_SLICE[s]) for s in scopes),
            "--max-slice", ",".join(str(MAX_SLICE[s]) for s in scopes),
            "--grid", ",".join("per-slice" if PER_SLICE_GRID[s] else "capped" for s in scopes),
            "--threads", str(THREADS_PER_BLOCK),
        ]  # fmt: skip
        bw = nvshmem.run(
            binary, nranks, "bw",
            ["--scope", ",".join(scopes), "--sizes", ",".join(map(str, sizes)), *split,
             "--blocks", str(BLOCKS_PER_SM * _sm_count()), "--reps", ",".join(str(reps(z)) for z in sizes)],
            timeout_s=1200,
        )  # fmt: skip
        lat = nvshmem.run(binary, 2, "lat", ["--iters", str(pingpongs)], timeout_s=300)
    except (nvshmem.PeerUnavailable, nvshmem.PeerFailed) as error:
        return {"error": str(error)}
    table: dict[tuple[str, int], float] = {}
    for rank in bw:
        for row in rank["rows"]:
            key = (row["scope"], row["size"])
            table[key] = table.get(key, 0.0) + row["gbps"]
            if row.get("errors"):
                return {"error": f"NVSHMEM data check failed: {row}"}
    latency = {row["variant"]: row["one_way_us"] for row in lat[0]["rows"]}
    return {"version": bw[0]["version"], "GBps": table, "latency_us": latency}


def _sm_count() -> int:
    import torch

    return int(torch.cuda.get_device_properties(0).multi_processor_count)


_COLUMNS = (
    Column("scope", 6), Column("size", 10), Column("mori GB/s", 10, ".1f"), Column("copy GB/s", 10, ".1f"),
    Column("mori/copy", 9), Column("nvshmem GB/s", 13), Column("mori/nvshmem", 12), Column("mori us", 9, ".2f"),
)  # fmt: skip


def report(
    per_pe: list[dict[str, Any]], peer: dict[str, Any], nranks: int, scopes: list[str]
) -> tuple[str, dict[str, Any]]:
    """The printed table and the JSON document."""
    rows = summarize(per_pe)
    copy = {r["size_bytes"]: r["GBps"] for r in rows if r["scope"] == "copy"}
    peer_bw = peer.get("GBps", {})
    lines = [
        f"mori-shmem-bench: {nranks} PEs on one GPU (cuda backend), aggregate over PEs; "
        "ceiling = torch device copy of the same sizes, same PEs, same run",
        header(_COLUMNS),
    ]
    out_rows = []
    for measured in rows:
        if measured["scope"] == "copy":
            continue
        gbps, ceiling = measured["GBps"], copy[measured["size_bytes"]]
        nv = peer_bw.get((measured["scope"], measured["size_bytes"])) or None
        out_rows.append({**measured, "copy_GBps": ceiling, "nvshmem_GBps": nv})
        of_copy = gbps / ceiling if measured["size_bytes"] >= CEILING_FROM_BYTES else None
        cells = (measured["scope"], measured["size_bytes"], gbps, ceiling, optional(of_copy, ".0%"),
                 optional(nv, ".1f"), optional(nv and gbps / nv, ".0%"), measured["us"])  # fmt: skip
        lines.append(table_row(_COLUMNS, cells))
    latency_us = per_pe[0]["latency_s"] * 1e6
    nv_lat = peer.get("latency_us", {}).get("putmem_signal")
    lines.append(
        f"8-byte put-with-signal latency, device to device (half round trip): mori {latency_us:.2f} us"
        + (f", nvshmem {nv_lat:.2f} us" if nv_lat else "")
    )
    if "error" in peer:
        lines.append(f"NVSHMEM not measured: {peer['error']}")
    document = {
        "benchmark": "mori-shmem-bench",
        "backend": "cuda",
        "pes": nranks,
        "scopes": scopes,
        "rows": out_rows,
        "latency_us": latency_us,
        "nvshmem": {k: v for k, v in peer.items() if k != "GBps"} | {
            "rows": [{"scope": s, "size_bytes": z, "GBps": g} for (s, z), g in peer_bw.items()]
        },
    }  # fmt: skip
    return "\n".join(lines), document
