# SPDX-License-Identifier: MIT
"""``mori-ir-bench``: mori-shmem's device API called from Triton against the same calls from CUDA C++.

Everything is measured in one run by the same PEs (processes; several may share a GPU under CUDA
MPS), with ``MORI_SHMEM_BACKEND=cuda``:

- Put bandwidth: every PE puts one message of each size to its right neighbour at block scope,
  the message split over blocks by mori-shmem-bench's ``geometry("block", ...)`` (512 threads a
  block). Three kernels per size, in this order: the C++ ``mori_bench_put`` of mori-shmem-bench,
  the Triton ``put_block_kernel`` (``putmem_nbi_block`` + ``quiet_thread``, the same split and
  block size), and torch's device-to-device ``copy_`` of the same size (the ceiling: a put reads
  and writes every byte once, as a copy does). Each kernel is launched 3 times to warm up, then
  all PEs meet at a barrier and ``iterations(size)`` launches are timed with CUDA events on the
  PE's stream; a put launch does ``reps(size)`` puts (up to 64, each completed by a quiet before
  the next), so small messages time the put rather than the launch. GB/s = bytes / time per put,
  per PE and summed over PEs (aggregate). Every put measurement is checked: the receiver's buffer
  must hold the sender's bytes. Below ``CEILING_FROM_BYTES`` (128 MiB) the copy is launch-bound
  (one copy per launch) or L2-resident, so no ratio to it is given there.
- Latency: half the round trip of an 8-byte put-with-signal ping-pong between PE 0 and PE 1, all
  rounds inside one kernel on thread 0 (``%globaltimer`` around the loop, on PE 0), C++
  ``mori_bench_pingpong`` and the Triton ``pingpong_kernel`` with the same number of rounds, each
  after a short warm-up run.

The table goes to stdout, the JSON (rows, GPU, host, PEs, versions) to ``--json``.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import importlib.util
import logging
import math
import os
import platform
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mori.bench_report import Column, add_json, add_world_size, human_size, size_ladder, table, write_json
from mori.shmem.bench import gpu as bench_gpu

logger = logging.getLogger("mori.ir.bench")

SCOPE = "block"
DEFAULT_SIZES = "8..256M"
#: The kernels of a put row, in the order they are measured; "copy" is the ceiling.
VARIANTS = ("cxx", "triton", "copy")
WARMUP_ROUNDS = 100
PINGPONG_BYTES = 8
#: Keys of every row of the JSON document (summarize()).
ROW_KEYS = (
    "size_bytes", "blocks", "threads", "workers", "slice_bytes", "reps", "iterations",
    "cxx_GBps", "cxx_GBps_per_pe", "cxx_us",
    "triton_GBps", "triton_GBps_per_pe", "triton_us",
    "copy_GBps", "copy_GBps_per_pe", "copy_us",
    "triton_pct_of_cxx", "triton_pct_of_copy", "cxx_pct_of_copy",
)  # fmt: skip


# ----------------------------------------------------------------------------- arguments


def parse_sizes(text: str) -> list[int]:
    """Message sizes from ``--sizes``: comma-separated sizes (``4096``, ``4K``, ``1M``) and ranges
    ``LOW..HIGH`` (LOW, 4 LOW, 16 LOW, ... and HIGH itself); sorted, without repeats."""
    from mori.shmem.api import parse_size

    sizes: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            if ".." not in item:
                sizes.add(parse_size(item))
                continue
            low_text, _, high_text = item.partition("..")
            low, high = parse_size(low_text.strip()), parse_size(high_text.strip())
            if not 1 <= low <= high:
                raise ValueError(f"a range needs 1 <= LOW <= HIGH, got {low}..{high}")
            sizes.update(size_ladder(low, high, factor=4))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{item!r}: {exc}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give sizes of at least 1 byte, e.g. 8..256M or 4K,1M")
    return sorted(sizes)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mori-ir-bench", description=(__doc__ or "").splitlines()[0])
    add_world_size(parser, 2, aliases=("--pes",), dest="pes")
    parser.add_argument(
        "--sizes", type=parse_sizes, default=DEFAULT_SIZES,
        help=f"message sizes: a list (4K,1M) and/or ranges LOW..HIGH in powers of 4 (default {DEFAULT_SIZES})",
    )  # fmt: skip
    parser.add_argument("--pingpongs", type=int, default=10000, help="round trips of the latency test (default 10000)")
    add_json(parser, Path("mori-ir-bench.json"))
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds the PEs may take in all")
    args = parser.parse_args(argv)
    if args.pes < 2:
        parser.error(f"--world-size={args.pes}: the benchmark needs at least 2 PEs")
    if args.pingpongs < 1:
        parser.error(f"--pingpongs={args.pingpongs}: give at least 1 round trip")
    return args


# ----------------------------------------------------------------------------- one PE


def _pattern(torch: Any, pe: int, nbytes: int) -> Any:
    """The bytes PE pe puts: the same on every PE that asks (a seeded generator on the GPU)."""
    generator = torch.Generator(device="cuda")
    generator.manual_seed(1_000_003 + pe)
    return torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda", generator=generator)


def pe_row(
    variant: str, size: int, seconds: float, iterations: int, reps: int, geo: bench_gpu.Geometry
) -> dict[str, Any]:
    """One measurement of one PE: seconds per put (per copy) of size bytes, and how it was run."""
    return {"variant": variant, "size": size, "seconds": seconds, "iterations": iterations, "reps": reps,
            "blocks": geo.blocks, "threads": geo.threads, "workers": geo.workers, "slice": geo.slice}  # fmt: skip


def pe_program(
    rank: int, nranks: int, uid: bytes, sizes: list[int], rounds: int, extern_libs: dict[str, str]
) -> dict[str, Any]:
    """One PE of the benchmark (spawned by run_pes): per-PE timings of every size and the latency."""
    import numpy as np
    import torch

    import mori.ir.triton as mori_ir
    import mori.shmem as shmem
    from mori.ir import bench_kernels as bk
    from mori.shmem.testing import init_pe

    init_pe(rank, nranks, uid)
    torch.cuda.set_device(shmem.shmem_cuda_device())
    mori_ir.install_hook()
    cxx = bench_gpu.kernel_spec(SCOPE).load()  # one module holds both C++ kernels
    cxx_put, cxx_pingpong = cxx.function("mori_bench_put"), cxx.function("mori_bench_pingpong")
    state = shmem.shmem_device_state()
    stream = torch.cuda.current_stream()
    sm_count = int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)
    nxt, prv = (rank + 1) % nranks, (rank - 1) % nranks
    largest = max(sizes)
    dest = shmem.shmem_zeros(largest, np.uint8).torch()
    src = shmem.shmem_zeros(largest, np.uint8).torch()
    signals = shmem.shmem_zeros(2, np.int64).torch()  # one ping-pong signal word per variant
    src.copy_(_pattern(torch, rank, largest))
    expected = _pattern(torch, prv, largest)  # what the previous PE puts here
    copy_src, copy_dst = torch.empty_like(expected), torch.empty_like(expected)

    def sync() -> None:
        """Every earlier GPU operation of every PE has finished."""
        torch.cuda.synchronize()
        shmem.shmem_barrier_all()

    def timed_put(variant: str, launch: Callable[[], object], size: int, count: int) -> float:
        """timed_launches() of a put launch, then checks that the previous PE's bytes arrived here."""
        dest[:size].zero_()
        sync()  # no PE puts before its receiver has zeroed
        seconds = bench_gpu.timed_launches(launch, count, stream=stream)
        sync()
        if not torch.equal(dest[:size], expected[:size]):
            bad = int((dest[:size] != expected[:size]).sum().item())
            raise RuntimeError(f"PE {rank}: after the {variant} put of {size} bytes, {bad} bytes are not PE {prv}'s")
        return seconds

    rows: list[dict[str, Any]] = []
    for size in sizes:
        geo = bench_gpu.geometry(SCOPE, size, sm_count)
        reps, count = bench_gpu.reps(size), bench_gpu.iterations(size)
        cxx_args = [state, dest, src, ctypes.c_uint64(size), ctypes.c_uint64(geo.slice), ctypes.c_int32(geo.workers),
                    ctypes.c_int32(nxt), ctypes.c_int32(reps)]  # fmt: skip
        launches = {
            "cxx": functools.partial(cxx_put.launch, geo.blocks, geo.threads, cxx_args, stream=stream),
            "triton": functools.partial(bk.put_block_kernel[(geo.blocks,)], dest, src, size, geo.slice, geo.workers,
                                        nxt, reps, num_warps=geo.threads // 32, extern_libs=extern_libs),
            "copy": functools.partial(copy_dst[:size].copy_, copy_src[:size]),
        }  # fmt: skip
        for variant in VARIANTS:
            if variant == "copy":
                seconds = bench_gpu.timed_launches(launches[variant], count, stream=stream)
            else:
                seconds = timed_put(variant, launches[variant], size, count) / reps
            rows.append(pe_row(variant, size, seconds, count, 1 if variant == "copy" else reps, geo))

    # Latency: PE 0 (initiator) and PE 1; the others only keep the barriers company.
    active, peer, initiator = rank < 2, 1 - rank, 1 if rank == 0 else 0
    elapsed = torch.zeros(1, dtype=torch.int64, device="cuda")
    latency_s: dict[str, float] = {}
    for index, variant in enumerate(("cxx", "triton")):
        signal = signals[index : index + 1]
        for n in (WARMUP_ROUNDS, rounds):
            signal.zero_()
            elapsed.zero_()
            sync()
            if active and variant == "cxx":
                args = [state, dest, signal, ctypes.c_uint64(PINGPONG_BYTES), ctypes.c_int32(peer), ctypes.c_int32(n),
                        ctypes.c_int32(initiator), elapsed]  # fmt: skip
                cxx_pingpong.launch(1, 32, args, stream=stream)
            elif active:
                bk.pingpong_kernel[(1,)](dest, signal, PINGPONG_BYTES, peer, n, initiator, elapsed,
                                         num_warps=bk.PINGPONG_NUM_WARPS, extern_libs=extern_libs)  # fmt: skip
            sync()
            if active and int(signal.item()) != n:
                got = int(signal.item())
                raise RuntimeError(f"PE {rank}: the {variant} ping-pong of {n} rounds left the signal at {got}")
            if rank == 0 and int(elapsed.item()) <= 0:
                raise RuntimeError(f"PE 0: the {variant} ping-pong of {n} rounds recorded no time")
        latency_s[variant] = float(elapsed.item()) * 1e-9 / (2 * rounds) if rank == 0 else math.nan

    shmem.shmem_check_device_error()
    shmem.shmem_barrier_all()
    shmem.shmem_finalize()
    versions = {"torch": str(torch.__version__), "triton": str(bk.triton.__version__), "cuda": str(torch.version.cuda)}
    return {"rank": rank, "gpu": torch.cuda.get_device_name(), "sm_count": sm_count, "versions": versions,
            "rows": rows, "latency_s": latency_s}  # fmt: skip


# ----------------------------------------------------------------------------- the report


def _pct(part: float, whole: float) -> float | None:
    return 100.0 * part / whole if whole > 0 else None


def summarize(per_pe: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per size (keys ROW_KEYS): GB/s of each variant per PE (in rank order) and summed over
    PEs, the median time per put (per copy) in us, and the ratios of the aggregates in percent; the
    ratios to the copy only from bench_gpu.CEILING_FROM_BYTES on (None below)."""
    by_size: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for pe in sorted(per_pe, key=lambda p: int(p["rank"])):
        for row in pe["rows"]:
            by_size.setdefault(int(row["size"]), {}).setdefault(row["variant"], []).append(row)
    table = []
    for size in sorted(by_size):
        measured = by_size[size]
        put = measured["triton"][0]
        out: dict[str, Any] = {"size_bytes": size, "blocks": put["blocks"], "threads": put["threads"],
                               "workers": put["workers"], "slice_bytes": put["slice"], "reps": put["reps"],
                               "iterations": put["iterations"]}  # fmt: skip
        for variant in VARIANTS:
            per = [size / r["seconds"] / 1e9 for r in measured[variant]]
            out[f"{variant}_GBps"] = sum(per)
            out[f"{variant}_GBps_per_pe"] = per
            out[f"{variant}_us"] = statistics.median(r["seconds"] for r in measured[variant]) * 1e6
        ceiling = out["copy_GBps"] if size >= bench_gpu.CEILING_FROM_BYTES else 0.0
        out["triton_pct_of_cxx"] = _pct(out["triton_GBps"], out["cxx_GBps"])
        out["triton_pct_of_copy"] = _pct(out["triton_GBps"], ceiling)
        out["cxx_pct_of_copy"] = _pct(out["cxx_GBps"], ceiling)
        table.append({key: out[key] for key in ROW_KEYS})
    return table


def _pct_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


_COLUMNS = (
    Column("size", 6), Column("blocks", 6), Column("reps", 4), Column("triton GB/s", 11, ".2f"),
    Column("/PE", 8, ".2f"), Column("C++ GB/s", 10, ".2f"), Column("/PE", 8, ".2f"), Column("copy GB/s", 10, ".2f"),
    Column("tri/C++", 7), Column("tri/copy", 8), Column("C++/copy", 8), Column("triton us", 9, ".2f"),
    Column("C++ us", 8, ".2f"),
)  # fmt: skip


def report(per_pe: list[dict[str, Any]], rounds: int, host: str) -> tuple[str, dict[str, Any]]:
    """The printed table and the JSON document."""
    rows = summarize(per_pe)
    first = min(per_pe, key=lambda p: int(p["rank"]))
    pes = len(per_pe)
    lines = [
        f"mori-ir-bench: {pes} PEs on {first['gpu']} ({host}), cuda backend; block-scope put to the right neighbour, "
        f"split over blocks as in mori-shmem-bench; aggregate = sum over PEs, /PE = median PE; "
        f"copy = torch copy_ of the same size, same PEs, same run (ratios to it from "
        f"{human_size(bench_gpu.CEILING_FROM_BYTES)} on)",
    ]
    cells = [
        (human_size(row["size_bytes"]), row["blocks"], row["reps"], row["triton_GBps"],
         statistics.median(row["triton_GBps_per_pe"]), row["cxx_GBps"], statistics.median(row["cxx_GBps_per_pe"]),
         row["copy_GBps"], _pct_cell(row["triton_pct_of_cxx"]), _pct_cell(row["triton_pct_of_copy"]),
         _pct_cell(row["cxx_pct_of_copy"]), row["triton_us"], row["cxx_us"])
        for row in rows
    ]  # fmt: skip
    lines += table(_COLUMNS, cells, rule=False)
    triton_us, cxx_us = first["latency_s"]["triton"] * 1e6, first["latency_s"]["cxx"] * 1e6
    latency = {"bytes": PINGPONG_BYTES, "rounds": rounds, "triton_us": triton_us, "cxx_us": cxx_us,
               "triton_pct_of_cxx": _pct(triton_us, cxx_us)}  # fmt: skip
    ratio = latency["triton_pct_of_cxx"]
    lines.append(
        f"{PINGPONG_BYTES}-byte put-with-signal latency, PE 0 <-> PE 1, half round trip over {rounds} rounds in one "
        f"kernel: triton {triton_us:.2f} us, C++ {cxx_us:.2f} us"
        + (f" (triton time {ratio:.0f}% of C++)" if ratio is not None else "")
    )
    document = {
        "benchmark": "mori-ir-bench",
        "backend": "cuda",
        "scope": SCOPE,
        "host": host,
        "gpu": first["gpu"],
        "sm_count": first["sm_count"],
        "pes": pes,
        "versions": first["versions"],
        "ceiling": "torch copy_ of the same size, same PEs, same run; ratios from "
        f"{bench_gpu.CEILING_FROM_BYTES} bytes on",
        "timing": f"CUDA events over `iterations` launches after {bench_gpu.WARMUP_LAUNCHES} warm-up launches, all PEs "
        "starting together after a barrier; a put launch does `reps` puts; GB/s = size / time per put (per copy); "
        f"latency: %globaltimer on PE 0 around all rounds in one kernel, after {WARMUP_ROUNDS} warm-up rounds",
        "rows": rows,
        "latency": latency,
    }
    return "\n".join(lines), document


# ----------------------------------------------------------------------------- main


def _cannot_run() -> tuple[str | None, dict[str, str]]:
    """(why the benchmark cannot run here, or None; the extern_libs for the PEs)."""
    import mori.shmem as shmem

    if not shmem.shmem_cuda_available():
        from mori.shmem.jit.driver import unavailable_reason

        reason = unavailable_reason() or "no usable CUDA GPU"
        return (
            f"it times Triton and CUDA kernels and needs an NVIDIA GPU, and there is none here ({reason}); "
            "mori-shmem-bench --backend cpu measures the host API without one",
            {},
        )
    if importlib.util.find_spec("torch") is None:
        return "it needs torch with CUDA (pip install torch)", {}
    try:
        import mori.ir.triton as mori_ir

        return None, mori_ir.get_extern_libs()  # found (or built) once here, not by every PE
    except (ImportError, FileNotFoundError) as exc:
        return str(exc), {}


def main(argv: list[str] | None = None) -> int:
    from mori.shmem.testing import run_pes

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    problem, extern_libs = _cannot_run()
    if problem is not None:
        logger.error("mori-ir-bench cannot run: %s", problem)
        return 1
    if not Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")).exists():
        logger.warning(
            "no CUDA MPS daemon found: PEs that share a GPU then time-slice it and the ping-pong takes "
            "milliseconds per round; start one with `nvidia-cuda-mps-control -d` (docs/developer-guide/gpu.md)"
        )
    sizes: list[int] = args.sizes
    env = {"MORI_SHMEM_BACKEND": "cuda", "MORI_SHMEM_HEAP_SIZE": str(2 * max(sizes) + (64 << 20))}
    logger.info("mori-ir-bench: %d PEs, %d sizes %s..%s, %d ping-pong rounds", args.pes, len(sizes),
                human_size(sizes[0]), human_size(sizes[-1]), args.pingpongs)  # fmt: skip
    per_pe = run_pes(pe_program, args.pes, sizes, args.pingpongs, extern_libs, timeout=args.timeout, env=env)
    text, document = report(per_pe, args.pingpongs, platform.node())
    sys.stdout.write(text + "\n")
    write_json(args.json, document)
    logger.info("wrote %s", args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
