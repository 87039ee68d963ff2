# SPDX-License-Identifier: MIT
"""``mori-cco-bench``: mori.cco's all-reduce and fused GEMM + all-reduce beside torch.distributed,
measured in the same run across N local ranks (processes this command starts).

Modes:

* ``allreduce`` (the default): for each size, ``Communicator.all_reduce`` one-shot, two-shot and
  auto with an fp8 wire, beside ``torch.distributed.all_reduce``. Time is the max over ranks of each
  rank's mean per call; algorithm bandwidth = bytes / time and bus bandwidth = algbw * 2(n-1)/n
  (nccl-tests' definitions; the fp8 rows count the bytes of the tensor, not of the wire).
* ``gemm-ar``: a row-parallel linear layer, ``out[M, N] = sum over ranks of a[M, K/n] @ b[K/n, N]``:
  matmul + torch.distributed, matmul + mori all_reduce, ``gemm_all_reduce`` (native and fp8 wire),
  beside the GEMM and the all-reduces alone, so the table shows where the time goes. Overlap
  efficiency = (gemm + all-reduce - together) / min(gemm, all-reduce): 0 for back to back, 1 when
  the shorter one hides completely.

On cuda, times come from CUDA events around back-to-back calls queued while the GPU is held (so
Python's launch path is not what is measured); on cpu, from time.perf_counter. Every row is
checked once against torch.distributed: exactly on small-integer inputs where the result is exact
(one-shot, two-shot), else against the exact sum (fp32, or fp64 on cpu) of the same inputs
reduced by torch.distributed, within a tolerance derived from the rounding of the dtype or of
e4m3. A row that fails says MISMATCH and the command exits 1. Examples::

    mori-cco-bench                                      # all-reduce, 2 ranks, the backend found
    mori-cco-bench --world-size 8 --max-bytes 256M --json ar-8.json
    mori-cco-bench gemm-ar --world-size 4 --m 8192            # the fused GEMM + all-reduce
    nox -s bench-cco -- gemm-ar --backend cpu            # through nox, arguments after --
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import math
import multiprocessing
import os
import platform
import re
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mori.bench_report import Column, add_json, add_world_size, human_size, optional, size_ladder, table, write_json

logger = logging.getLogger("mori.cco.bench")

MODES = ("allreduce", "gemm-ar")
#: The exit code of a rank whose rows hold a MISMATCH (any other non-zero code is a failure).
_EXIT_MISMATCH = 3
#: GPU clock cycles (about 0.5 ms) of hold per timed call; see _Timer.per_call.
_HOLD_CYCLES_PER_CALL = 1_000_000
_MAX_HOLD_CYCLES = 2_000_000_000
#: Tolerances relative to (sum over ranks of |x_r| + |exact|) + rms(exact); see _compare. A rounding
#: to the dtype is within u = 2^-8 (bf16) or 2^-24 (fp32) of the value; a row sees a few (the
#: GEMM's output, the reduction, the store), so 8u leaves headroom while a lost rank, a stale chunk
#: or a wrong scale (errors the size of the values) still fails.
_RTOL = {"bfloat16": 2.0**-5, "float16": 2.0**-8, "float32": 2.0**-16}
#: e4m3 keeps 3 mantissa bits: one quantisation is within 2^-4 of the value, and two-shot quantises
#: twice (the inputs, then the reduced chunk it gathers).
_FP8_RTOL = 2.0**-3
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


# ----------------------------------------------------------------------------- arguments


def parse_size(text: str) -> int:
    """Bytes in ``"8K"``, ``"64M"``, ``"1GiB"`` or ``"4096"`` (binary units)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if not match or int(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size such as 8192, 8K, 64M or 1G")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mori-cco-bench",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument(
        "mode", nargs="?", choices=MODES, default="allreduce", help="what to measure (default allreduce)"
    )
    add_world_size(parser, 2, "ranks (processes)", aliases=("--world",), dest="world")
    parser.add_argument(
        "--backend",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto (the default): cuda when torch sees a GPU",
    )
    parser.add_argument(
        "--dist-backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="torch.distributed's backend; auto (the default): nccl on cuda when every rank has a GPU of its own, gloo "
        "otherwise (NCCL refuses two ranks on one GPU, even under MPS)",
    )
    parser.add_argument(
        "--dtype", choices=("bfloat16", "float32"), default=None, help="default bfloat16 (gemm-ar on cpu: float32)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before each measurement (default 5)")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per measurement (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    add_json(parser, Path("mori-cco-bench.json"), help="where rank 0 writes the results (default mori-cco-bench.json)")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="seconds before the ranks are stopped (default 1800)"
    )
    group = parser.add_argument_group("allreduce")
    group.add_argument("--min-bytes", type=parse_size, default=8 << 10, help="smallest message (default 8K)")
    group.add_argument("--max-bytes", type=parse_size, default=None, help="largest message (default 64M cuda, 8M cpu)")
    group.add_argument("--step", type=int, default=4, help="factor between sizes (default 4)")
    group = parser.add_argument_group("gemm-ar (a row-parallel linear layer; K is split over the ranks)")
    group.add_argument("--m", type=int, default=None, help="rows (tokens); default 4096 cuda, 512 cpu")
    group.add_argument("--n", type=int, default=None, help="output features; default 8192 cuda, 1024 cpu")
    group.add_argument("--k", type=int, default=None, help="input features in total; default 8192 cuda, 1024 cpu")
    group.add_argument(
        "--chunks", type=int, default=4, help="gemm_all_reduce's chunks (default 4: the pipeline; 1 = sequential)"
    )
    args = parser.parse_args(argv)
    if args.world < 1:
        parser.error(f"--world-size={args.world} must be at least 1")
    if args.warmup < 0 or args.iters < 1:
        parser.error(f"--warmup={args.warmup} must be >= 0 and --iters={args.iters} >= 1")
    if args.step < 2:
        parser.error(f"--step={args.step} must be at least 2")
    if args.max_bytes is not None and args.max_bytes < args.min_bytes:
        parser.error(f"--max-bytes={args.max_bytes} is below --min-bytes={args.min_bytes}")
    for name in ("m", "n", "k", "chunks"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name}={value} must be positive")
    if args.k is not None and args.k % args.world:
        parser.error(f"--k={args.k} must be a multiple of --world-size={args.world} (each rank holds k / world)")
    return args


@dataclasses.dataclass(frozen=True)
class Config:
    """What every rank needs to know (pickled to the spawned ranks)."""

    mode: str
    backend: str
    dist_backend: str
    world: int
    gpus: int
    port: int
    dtype: str
    sizes: tuple[int, ...]
    m: int
    n: int
    k: int
    chunks: int | None
    warmup: int
    iters: int
    seed: int
    timeout: float
    json_path: str
    log_level: int


# ----------------------------------------------------------------------------- one rank


class _Timer:
    """Times calls on one rank, every rank starting each measurement together."""

    def __init__(self, comm: Any, dist: Any, device: Any, warmup: int, iters: int) -> None:
        import torch

        self.torch = torch
        self.comm = comm
        self.dist = dist
        self.cuda = device.type == "cuda"
        self.warmup = warmup
        self.iters = iters
        self._flag = torch.zeros(1, dtype=torch.float32, device=device)

    def _rendezvous(self) -> None:
        # A tiny all-reduce on the communicator: on cuda every rank's GPU leaves it within a few
        # microseconds of the others, closer than any host barrier lines up the hosts.
        self.comm.all_reduce(self._flag, algorithm="one_shot")

    def per_call(self, fn: Callable[[], object]) -> float:
        """Mean seconds per call of ``fn`` on this rank."""
        for _ in range(self.warmup):
            fn()
        if self.cuda:
            self.torch.cuda.synchronize()
        self.dist.barrier()
        if not self.cuda:
            self._rendezvous()
            start = time.perf_counter()
            for _ in range(self.iters):
                fn()
            return (time.perf_counter() - start) / self.iters
        cuda = self.torch.cuda
        begin, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        # Keep the GPU busy while this process queues the timed calls: the GPU then runs them
        # back to back and the time is theirs, not Python's launch path between them.
        sleep = getattr(cuda, "_sleep", None)
        if sleep is not None:
            sleep(min(_HOLD_CYCLES_PER_CALL * self.iters, _MAX_HOLD_CYCLES))
        self._rendezvous()
        begin.record()
        for _ in range(self.iters):
            fn()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) * 1e-3 / self.iters


def _compare(result: Any, exact: Any, abs_sum: Any, rtol: float) -> tuple[bool, float, float]:
    """(within tolerance, ||result - exact|| / ||exact||, max |result - exact| / max |exact|).

    The bound per element is rtol * (sum over ranks of |x_r| + |exact| + rms(exact)): rounding
    errors scale with the terms summed, not with the sum (which cancellation can make small), and
    the rms term covers elements where every term is near zero but the GEMM's internal rounding is not."""
    import torch

    diff = (result.to(exact.dtype) - exact).abs()
    magnitude = exact.abs()
    rms = float(exact.pow(2).mean().sqrt()) if exact.numel() else 0.0
    within = bool(torch.isfinite(result).all()) and bool((diff <= rtol * (abs_sum + magnitude + rms)).all())
    norm, diff_norm = float(torch.linalg.vector_norm(exact)), float(torch.linalg.vector_norm(diff))
    largest, worst = float(magnitude.max()) if exact.numel() else 0.0, float(diff.max()) if exact.numel() else 0.0
    return within, diff_norm / norm if norm > 0 else diff_norm, worst / largest if largest > 0 else worst


def _compare_exact(result: Any, expected: Any) -> tuple[bool, float, float]:
    """(bitwise equal, normwise and max relative error) for results that must match exactly."""
    import torch

    equal = bool(torch.equal(result, expected))
    if equal:
        return True, 0.0, 0.0
    wide = torch.float64 if result.device.type == "cpu" else torch.float32
    _, rel, max_rel = _compare(result.to(wide), expected.to(wide), expected.to(wide).abs(), 0.0)
    return False, rel, max_rel


def _reduced(dist: Any, tensor: Any) -> Any:
    """torch.distributed's sum over ranks of ``tensor`` (a copy)."""
    out = tensor.clone()
    dist.all_reduce(out)
    return out


def _allreduce_rank(cfg: Config, comm: Any, dist: Any, device: Any, timer: _Timer) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for index, size in enumerate(cfg.sizes):
        rows += _allreduce_size(cfg, size, comm, dist, device, timer)
        if comm.rank == 0:
            logger.info("size %d/%d (%s) measured", index + 1, len(cfg.sizes), human_size(rows[-1]["size_bytes"]))
    return rows


def _allreduce_size(cfg: Config, size: int, comm: Any, dist: Any, device: Any, timer: _Timer) -> list[dict[str, Any]]:
    """The rows of one message size."""
    import torch

    from mori.cco import _C

    dtype = getattr(torch, cfg.dtype)
    # The exact sums: fp32 holds the sum of a few bf16 values exactly; fp64 (cpu) also float32 ones.
    wide = torch.float64 if device.type == "cpu" else torch.float32
    element = torch.empty((), dtype=dtype).element_size()
    count = max(1, size // element)
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + comm.rank * 7919 + count)
    # Small integers: every partial sum is exact in bf16, so any correct algorithm agrees bit for bit.
    ints = torch.randint(-4, 5, (count,), generator=generator).to(dtype).to(device)
    normal = torch.randn(count, generator=generator).to(dtype).to(device)
    out = torch.empty_like(normal)
    zeros = torch.zeros_like(normal)  # torch's in-place timing loop: sums stay 0, never overflow
    torch_ints = _reduced(dist, ints)
    exact_ints = _reduced(dist, ints.to(wide))
    exact = _reduced(dist, normal.to(wide))
    abs_sum = _reduced(dist, normal.to(wide).abs())

    def ours(x: Any, algorithm: str, wire: str | None) -> Any:
        return comm.all_reduce(x, out=out, algorithm=algorithm, wire_dtype=wire)

    # What "auto" picks for this size (Communicator.all_reduce's rule), for the record.
    picked = "one_shot" if count * element <= int(_C.setting_size("MORI_CCO_ONE_SHOT_MAX")) else "two_shot"

    # (variant, algorithm, wire dtype, the check run once, the call timed)
    cases: list[tuple[str, str, str | None, Callable[[], tuple[bool, float, float]], Callable[[], object]]] = [
        (
            "one_shot",
            "one_shot",
            None,
            lambda: _compare_exact(ours(ints, "one_shot", None), torch_ints),
            lambda: ours(normal, "one_shot", None),
        ),
        (
            "two_shot",
            "two_shot",
            None,
            lambda: _compare_exact(ours(ints, "two_shot", None), torch_ints),
            lambda: ours(normal, "two_shot", None),
        ),
        (
            "auto_fp8",
            f"auto: {picked}",
            "fp8",
            lambda: _compare(ours(normal, "auto", "fp8"), exact, abs_sum, _FP8_RTOL),
            lambda: ours(normal, "auto", "fp8"),
        ),
        (
            "torch",
            "torch.distributed",
            None,
            lambda: _compare_exact(torch_ints.to(wide), exact_ints),
            lambda: dist.all_reduce(zeros),
        ),
    ]
    rows = []
    for variant, algorithm, wire, check, timed in cases:
        ok, rel_err, max_rel_err = check()
        rows.append(
            {
                "size_bytes": count * element,
                "count": count,
                "variant": variant,
                "algorithm": algorithm,
                "wire_dtype": wire,
                "time_s": timer.per_call(timed),
                "ok": ok,
                "rel_err": rel_err,
                "max_rel_err": max_rel_err,
            }
        )
    return rows


def _gemm_rank(cfg: Config, comm: Any, dist: Any, device: Any, timer: _Timer) -> list[dict[str, Any]]:
    import torch

    from mori.cco.gemm_all_reduce import gemm_all_reduce

    dtype = getattr(torch, cfg.dtype)
    wide = torch.float64 if device.type == "cpu" else torch.float32
    rtol = _RTOL[cfg.dtype]
    shard = cfg.k // cfg.world
    generator = torch.Generator().manual_seed(cfg.seed * 1_000_003 + comm.rank)
    # b scaled by 1/sqrt(k): every output element is a sum of k products of variance 1/k, about N(0, 1).
    a = torch.randn(cfg.m, shard, generator=generator).to(dtype).to(device)
    b = (torch.randn(shard, cfg.n, generator=generator) / math.sqrt(cfg.k)).to(dtype).to(device)
    y = torch.empty(cfg.m, cfg.n, dtype=dtype, device=device)
    zeros = torch.zeros_like(y)  # torch's in-place all-reduce timing loop: stays 0, never overflows
    partial = torch.matmul(a, b)  # the all-reduce-alone rows reduce this rank's GEMM output
    local_exact = a.to(wide) @ b.to(wide)
    exact = _reduced(dist, local_exact)
    abs_sum = _reduced(dist, local_exact.abs())
    exact_ar = _reduced(dist, partial.to(wide))
    abs_ar = _reduced(dist, partial.to(wide).abs())

    def mm_torch() -> None:
        torch.matmul(a, b, out=y)
        dist.all_reduce(y)

    def mm_cco() -> None:
        torch.matmul(a, b, out=y)
        comm.all_reduce(y)

    def fused() -> None:
        gemm_all_reduce(comm, a, b, out=y, chunks=cfg.chunks)

    def fused_fp8() -> None:
        gemm_all_reduce(comm, a, b, out=y, chunks=cfg.chunks, wire_dtype="fp8")

    def gemm() -> None:
        torch.matmul(a, b, out=y)

    def cco_ar() -> None:
        comm.all_reduce(partial, out=y)

    def cco_ar_fp8() -> None:
        comm.all_reduce(partial, out=y, wire_dtype="fp8")

    def torch_ar_check() -> tuple[bool, float, float]:
        return _compare(_reduced(dist, partial), exact_ar, abs_ar, rtol)

    def checked(fn: Callable[[], None], reference: Any, magnitude: Any, tolerance: float) -> Callable[[], Any]:
        def run() -> tuple[bool, float, float]:
            fn()
            return _compare(y, reference, magnitude, tolerance)

        return run

    cases: list[tuple[str, Callable[[], tuple[bool, float, float]], Callable[[], object]]] = [
        ("matmul+torch_ar", checked(mm_torch, exact, abs_sum, rtol), mm_torch),
        ("matmul+cco_ar", checked(mm_cco, exact, abs_sum, rtol), mm_cco),
        ("fused", checked(fused, exact, abs_sum, rtol), fused),
        ("fused_fp8", checked(fused_fp8, exact, abs_sum, _FP8_RTOL), fused_fp8),
        ("gemm", checked(gemm, local_exact, local_exact.abs(), rtol), gemm),
        ("cco_ar", checked(cco_ar, exact_ar, abs_ar, rtol), cco_ar),
        ("cco_ar_fp8", checked(cco_ar_fp8, exact_ar, abs_ar, _FP8_RTOL), cco_ar_fp8),
        ("torch_ar", torch_ar_check, lambda: dist.all_reduce(zeros)),
    ]
    rows: list[dict[str, Any]] = []
    for index, (variant, check, timed) in enumerate(cases):
        ok, rel_err, max_rel_err = check()
        rows.append(
            {
                "variant": variant,
                "time_s": timer.per_call(timed),
                "ok": ok,
                "rel_err": rel_err,
                "max_rel_err": max_rel_err,
            }
        )
        if comm.rank == 0:
            logger.info("%d/%d (%s) measured", index + 1, len(cases), variant)
    return rows


def _rank_main(rank: int, cfg: Config) -> None:
    """One rank: joins torch.distributed and a mori.cco communicator, measures, and (rank 0)
    gathers every rank's measurements, prints the table and writes the JSON."""
    logging.basicConfig(level=cfg.log_level, format=f"[rank {rank}] %(message)s" if rank else "%(message)s")
    import torch
    import torch.distributed as dist

    import mori.cco as cco

    if cfg.backend == "cuda":
        # One visible GPU: every rank shares it (several processes under MPS); else one each.
        gpu = 0 if cfg.gpus == 1 else rank % cfg.gpus
        torch.cuda.set_device(gpu)
        device = torch.device("cuda", gpu)
        # The exact references are fp32 GEMMs: TF32 would make them as rough as what they check.
        torch.backends.cuda.matmul.allow_tf32 = False
    else:
        gpu = -1
        device = torch.device("cpu")
        # The ranks share the cores: one intra-op pool per rank over all of them oversubscribes.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg.world))
    dist.init_process_group(
        cfg.dist_backend,
        init_method=f"tcp://127.0.0.1:{cfg.port}",
        rank=rank,
        world_size=cfg.world,
        timeout=datetime.timedelta(seconds=cfg.timeout),
    )
    try:
        box: list[Any] = [bytes(cco.get_unique_id()) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        comm = cco.Communicator.init(cfg.world, rank, box[0], backend=cfg.backend, device=gpu if gpu >= 0 else None)
        try:
            timer = _Timer(comm, dist, device, cfg.warmup, cfg.iters)
            measure = _allreduce_rank if cfg.mode == "allreduce" else _gemm_rank
            rows = measure(cfg, comm, dist, device, timer)
        finally:
            comm.destroy()
        gathered: list[Any] | None = [None] * cfg.world if rank == 0 else None
        dist.gather_object(rows, gathered, dst=0)
        device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    finally:
        dist.destroy_process_group()
    if rank == 0 and gathered is not None:
        report = build_report(cfg, gathered, device_name or platform.machine())
        sys.stdout.write(format_table(report) + "\n")
        sys.stdout.flush()
        write_json(Path(cfg.json_path), report, indent=1)
        logger.info("wrote %s", cfg.json_path)
        if not report["ok"]:
            logger.error("some rows do not match torch.distributed's result (check column)")
            sys.exit(_EXIT_MISMATCH)


# ----------------------------------------------------------------------------- the report (rank 0)

_GEMM_LABELS = {
    "matmul+torch_ar": "matmul + torch.distributed all_reduce",
    "matmul+cco_ar": "matmul + mori all_reduce",
    "fused": "gemm_all_reduce",
    "fused_fp8": "gemm_all_reduce, fp8 wire",
    "gemm": "matmul alone",
    "cco_ar": "mori all_reduce alone",
    "cco_ar_fp8": "mori all_reduce alone, fp8 wire",
    "torch_ar": "torch.distributed all_reduce alone",
}
#: For each GEMM + all-reduce row, the all-reduce-alone row its overlap is measured against.
_OVERLAP_AR = {"matmul+torch_ar": "torch_ar", "matmul+cco_ar": "cco_ar", "fused": "cco_ar", "fused_fp8": "cco_ar_fp8"}


def _merge(per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per measurement: the max over ranks of the times and errors, ok only if every rank is."""
    merged = []
    for rows in zip(*per_rank, strict=True):
        row = {k: v for k, v in rows[0].items() if k not in ("time_s", "ok", "rel_err", "max_rel_err")}
        times = [r["time_s"] for r in rows]
        row |= {
            "time_us": max(times) * 1e6,
            "time_us_per_rank": [t * 1e6 for t in times],
            "rel_err": max(r["rel_err"] for r in rows),
            "max_rel_err": max(r["max_rel_err"] for r in rows),
            "check": "ok" if all(r["ok"] for r in rows) else "MISMATCH",
        }
        merged.append(row)
    return merged


def build_report(cfg: Config, per_rank: list[list[dict[str, Any]]], device_name: str) -> dict[str, Any]:
    """The JSON document of a run from every rank's rows (see the module docstring)."""
    rows = _merge(per_rank)
    report: dict[str, Any] = {
        "benchmark": "mori-cco-bench",
        "mode": cfg.mode,
        "backend": cfg.backend,
        "dist_backend": cfg.dist_backend,
        "world": cfg.world,
        "host": platform.node(),
        "device": device_name,
        "dtype": cfg.dtype,
        "warmup": cfg.warmup,
        "iters": cfg.iters,
    }
    if cfg.mode == "allreduce":
        bus_factor = 2 * (cfg.world - 1) / cfg.world
        torch_us = {r["size_bytes"]: r["time_us"] for r in rows if r["variant"] == "torch"}
        for r in rows:
            algbw = r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9
            r["algbw_GBps"] = algbw
            r["busbw_GBps"] = algbw * bus_factor
            r["speedup_vs_torch"] = torch_us[r["size_bytes"]] / r["time_us"]
    else:
        from mori.cco.gemm_all_reduce import default_chunks

        chunks = cfg.chunks if cfg.chunks is not None else default_chunks(cfg.m)
        report["gemm"] = {"m": cfg.m, "n": cfg.n, "k": cfg.k, "k_per_rank": cfg.k // cfg.world, "chunks": chunks}
        by_name = {r["variant"]: r for r in rows}
        gemm_us = by_name["gemm"]["time_us"]
        for r in rows:
            r["description"] = _GEMM_LABELS[r["variant"]]
            r["speedup_vs_torch"] = None
            r["overlap_efficiency"] = None
            if r["variant"] in _OVERLAP_AR:
                ar_us = by_name[_OVERLAP_AR[r["variant"]]]["time_us"]
                r["speedup_vs_torch"] = by_name["matmul+torch_ar"]["time_us"] / r["time_us"]
                r["overlap_efficiency"] = (gemm_us + ar_us - r["time_us"]) / min(gemm_us, ar_us)
        report["gemm"]["tflops_per_rank"] = 2 * cfg.m * cfg.n * (cfg.k // cfg.world) / (gemm_us * 1e-6) / 1e12
    report["rows"] = rows
    report["ok"] = all(r["check"] == "ok" for r in rows)
    return report


_ALLREDUCE_COLUMNS = (
    Column("size", 6), Column("variant", 9), Column("time us", 11, ".1f"), Column("algbw GB/s", 11, ".2f"),
    Column("busbw GB/s", 11, ".2f"), Column("vs torch", 9), Column("max rel err", 12, ".2e"), Column("check", 8),
)  # fmt: skip
_GEMM_COLUMNS = (
    Column("variant", 38, align="<"), Column("time us", 11, ".1f"), Column("vs torch", 9), Column("overlap", 8),
    Column("rel err", 10, ".2e"), Column("check", 8),
)  # fmt: skip


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_table(report: dict[str, Any]) -> str:
    """The printed table of a report."""
    head = (
        f"mori-cco-bench {report['mode']}: {report['world']} ranks, {report['backend']} backend ({report['device']}), "
        f"{report['dtype']}, torch.distributed on {report['dist_backend']}, "
        f"{report['iters']} timed calls after {report['warmup']} warmup, time = max over ranks"
    )
    lines = [head]
    if report["mode"] == "allreduce":
        cells: list[tuple[object, ...]] = [
            (human_size(r["size_bytes"]), r["variant"], r["time_us"], r["algbw_GBps"], r["busbw_GBps"],
             _speedup(r["speedup_vs_torch"]), r["max_rel_err"], r["check"])
            for r in report["rows"]
        ]  # fmt: skip
        lines += table(_ALLREDUCE_COLUMNS, cells)
        lines.append("bus bandwidth = algbw * 2(n-1)/n; max rel err = max |ours - exact| / max |exact|")
        return "\n".join(lines)
    g = report["gemm"]
    lines.append(
        f"out[{g['m']}, {g['n']}] = sum over ranks of a[{g['m']}, {g['k_per_rank']}] @ b[{g['k_per_rank']}, {g['n']}]; "
        f"gemm_all_reduce in {g['chunks']} chunks; matmul alone: {g['tflops_per_rank']:.2f} TFLOP/s per rank"
    )
    cells = [
        (r["description"], r["time_us"], _speedup(r["speedup_vs_torch"]), optional(r["overlap_efficiency"], ".0%"),
         r["rel_err"], r["check"])
        for r in report["rows"]
    ]  # fmt: skip
    lines += table(_GEMM_COLUMNS, cells)
    lines.append(
        "overlap = (matmul + that all-reduce alone - row) / min of the two; rel err = ||out - exact|| / ||exact||"
    )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the launcher


def _free_port() -> int:
    # Bound then released: the TCP store binds it a moment later (a race only other local
    # processes could lose us, and then init fails loudly).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(cfg: Config, timeout: float) -> int:
    """Runs every rank in its own spawned process; 0 when all rows match, 1 on a MISMATCH, 2 when a
    rank failed or the run timed out."""
    context = multiprocessing.get_context("spawn")  # fork would copy this process's CUDA state
    procs = [
        context.Process(target=_rank_main, args=(rank, cfg), name=f"mori-cco-bench-rank{rank}")
        for rank in range(cfg.world)
    ]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout
    try:
        while any(proc.exitcode is None for proc in procs):
            failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0, _EXIT_MISMATCH)]
            if failed:
                # The others wait for the failed rank in a collective: stop them instead of their timeouts.
                logger.error("rank %d exited with code %s; stopping the other ranks", *failed[0])
                break
            if time.monotonic() > deadline:
                logger.error("the ranks ran past --timeout=%.0f s; stopping them", timeout)
                break
            procs[0].join(0.2)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()
    codes = [proc.exitcode for proc in procs]
    if all(code == 0 for code in codes):
        return 0
    if all(code in (0, _EXIT_MISMATCH) for code in codes):
        return 1
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import torch

    backend = args.backend
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "cpu"
    gpus = torch.cuda.device_count() if backend == "cuda" else 0
    if backend == "cuda" and gpus == 0:
        raise SystemExit("--backend cuda: torch sees no GPU")
    dist_backend = args.dist_backend
    if dist_backend == "auto":
        dist_backend = "nccl" if backend == "cuda" and args.world <= gpus else "gloo"
        if backend == "cuda" and dist_backend == "gloo":
            logger.warning(
                "%d ranks on %d GPU(s): torch.distributed runs on gloo (NCCL refuses two ranks on one GPU), "
                "so its rows measure gloo staging through host memory, not NCCL",
                args.world,
                gpus,
            )
    elif dist_backend == "nccl" and backend != "cuda":
        raise SystemExit("--dist-backend nccl needs the cuda backend")
    if backend == "cuda" and args.world > gpus:
        mps_pipe = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
        if not mps_pipe.exists():
            logger.warning(
                "no CUDA MPS daemon found: ranks that share a GPU then time-slice it and every wait for a peer "
                "takes milliseconds; start one with `nvidia-cuda-mps-control -d`"
            )
    cuda = backend == "cuda"
    dtype = args.dtype or ("float32" if args.mode == "gemm-ar" and not cuda else "bfloat16")
    m = args.m or (4096 if cuda else 512)
    n = args.n or (8192 if cuda else 1024)
    k = args.k or (8192 if cuda else 1024)
    if k % args.world:
        raise SystemExit(f"k={k} must be a multiple of --world-size={args.world} (each rank holds k / world)")
    max_bytes = args.max_bytes or ((64 << 20) if cuda else (8 << 20))
    if max_bytes < args.min_bytes:
        raise SystemExit(f"--min-bytes={args.min_bytes} is above the largest size {max_bytes}")
    as_given = {name: getattr(args, name) for name in ("mode", "world", "chunks", "warmup", "iters", "seed", "timeout")}
    cfg = Config(
        **as_given,
        backend=backend,
        dist_backend=dist_backend,
        gpus=gpus,
        port=_free_port(),
        dtype=dtype,
        sizes=tuple(size_ladder(args.min_bytes, max_bytes, args.step)),
        m=m,
        n=n,
        k=k,
        json_path=str(args.json.resolve()),
        log_level=logging.getLogger().getEffectiveLevel(),
    )
    logger.info(
        "mori-cco-bench %s: %d ranks on the %s backend, torch.distributed on %s",
        cfg.mode,
        cfg.world,
        backend,
        dist_backend,
    )
    return _launch(cfg, args.timeout)


if __name__ == "__main__":
    raise SystemExit(main())
