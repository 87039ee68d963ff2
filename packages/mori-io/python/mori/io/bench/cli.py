# SPDX-License-Identifier: MIT
"""Command line of ``mori-io-bench`` (flags named as nixlbench's where they mean the same).

Host memory over TCP by default, against a plain-socket ceiling (and Mooncake when installed);
``--backend rdma`` measures the RDMA backend (UCX: verbs where there is RDMA hardware, else UCX's
tcp transport) against the same ceiling. ``--backend p2p`` (or ``--initiator_seg_type VRAM
--target_seg_type VRAM``) moves GPU memory between two processes and compares with a
device-to-device copy ceiling (bench/gpu.py)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from mori.bench_report import add_json
from mori.io.bench import report
from mori.io.bench.runner import Point, Samples, measure, summarize, time_iterations
from mori.io.bench.transports import Layout, MoriTransport, SocketCeiling, SocketStreams, buffer_bytes

log = logging.getLogger("mori.io.bench")
MiB = 1 << 20


def doubling(start: int, stop: int) -> list[int]:
    out = []
    value = start
    while value <= stop:
        out.append(value)
        value *= 2
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="mori-io-bench", description=__doc__)
    p.add_argument("--op_type", choices=["READ", "WRITE"], type=str.upper, default="WRITE")
    p.add_argument("--start_block_size", type=int, default=4096)
    p.add_argument("--max_block_size", type=int, default=64 * MiB)
    p.add_argument("--start_batch_size", type=int, default=1)
    p.add_argument("--max_batch_size", type=int, default=1)
    p.add_argument("--num_threads", type=int, default=1, help="initiator threads posting concurrently")
    p.add_argument("--num_iter", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3,
                   help="tcp/rdma: split each point's iterations into alternating rounds over the transports, so "
                        "all of them see the same spells of a busy machine (1: one run each)")  # fmt: skip
    p.add_argument("--warmup_iter", type=int, default=100)
    p.add_argument(
        "--max_bytes_per_point",
        type=int,
        default=1 << 30,
        help="caps iterations so each point moves at most this many bytes (at least 5 iterations)",
    )
    p.add_argument("--num_data_conns", type=int, default=8, help="mori-io TCP lanes per peer")
    p.add_argument("--min_stripe_bytes", type=int,
                   help="the initiator's TcpBackendConfig.min_stripe_bytes (default: the config's)")  # fmt: skip
    p.add_argument("--gap", type=int, default=64, help="bytes between descriptors (0: contiguous, mergeable)")
    p.add_argument("--max_buffer_bytes", type=int, default=2 << 30, help="refuse sweeps needing more memory")
    p.add_argument("--backend", choices=["tcp", "rdma", "p2p"], type=str.lower, default="tcp",
                   help="rdma: BackendType.RDMA (UCX) on both sides; "
                        "p2p: BackendType.XGMI between GPU segments of two processes on this host")  # fmt: skip
    p.add_argument("--num_qp_per_transfer", type=int, default=1,
                   help="--backend rdma: UCP endpoints per peer (RdmaBackendConfig.qp_per_transfer)")  # fmt: skip
    p.add_argument("--enable_notification", action="store_true",
                   help="--backend rdma: announce each transfer to the target (off, as in MORI's bench)")  # fmt: skip
    p.add_argument("--initiator_seg_type", choices=["DRAM", "VRAM"], type=str.upper,
                   help="DRAM: host, VRAM: GPU memory (default: VRAM with --backend p2p, else DRAM)")  # fmt: skip
    p.add_argument("--target_seg_type", choices=["DRAM", "VRAM"], type=str.upper)
    p.add_argument("--device", type=int, default=0, help="CUDA device of the initiator's VRAM segment")
    p.add_argument("--target_device", type=int, default=0, help="CUDA device of the target's VRAM segment")
    p.add_argument("--skip_ceiling", action="store_true")
    p.add_argument("--idle_seconds", type=float, default=1.0,
                   help="tcp/rdma: seconds over which both mori-io processes' idle CPU is measured")  # fmt: skip
    p.add_argument("--skip_mooncake", action="store_true")
    add_json(p, None)
    p.add_argument("--log_level", default="WARNING")
    return p.parse_args(argv)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(name)s %(levelname)s: %(message)s")
    blocks = doubling(args.start_block_size, args.max_block_size)
    batches = doubling(args.start_batch_size, args.max_batch_size)
    if not blocks or not batches or args.num_threads < 1:
        sys.stderr.write("empty sweep: check the start/max sizes and --num_threads\n")
        return 2
    if args.rounds < 1:
        sys.stderr.write(f"--rounds {args.rounds}: at least 1\n")
        return 2
    size = buffer_bytes(blocks[-1], batches[-1], args.num_threads, args.gap)
    if size > args.max_buffer_bytes:
        sys.stderr.write(f"the sweep needs {size} bytes per side (> --max_buffer_bytes {args.max_buffer_bytes})\n")
        return 2

    seg_default = "VRAM" if args.backend == "p2p" else "DRAM"
    args.initiator_seg_type = args.initiator_seg_type or seg_default
    args.target_seg_type = args.target_seg_type or seg_default
    if args.backend == "rdma" and "VRAM" in (args.initiator_seg_type, args.target_seg_type):
        sys.stderr.write("--backend rdma measures host (DRAM) segments only\n")
        return 2
    if args.backend == "p2p" or "VRAM" in (args.initiator_seg_type, args.target_seg_type):
        return _main_gpu(args, blocks, batches, size)

    notes: dict[str, str] = {}
    rdma = (args.num_qp_per_transfer, args.enable_notification) if args.backend == "rdma" else None
    transports: list = [MoriTransport(size, args.num_data_conns, rdma, args.min_stripe_bytes)]
    notes["mori-io validated"] = str(transports[0].validate())
    if args.idle_seconds > 0:
        notes["idle cpu"] = idle_cpu(transports[0], args.idle_seconds)
    if not args.skip_ceiling:
        transports.append(SocketCeiling(size))
        if args.num_data_conns > 1:
            transports.append(SocketStreams(size, args.num_data_conns))
    if not args.skip_mooncake:
        try:
            from mori.io.bench.transports import MooncakeTransport

            transports.append(MooncakeTransport(size))
        except Exception as exc:  # ImportError, or its native engine refusing this machine
            notes["mooncake-tcp"] = f"not measured: {type(exc).__name__}: {exc}"
            log.warning("Mooncake not measured: %s", exc)

    points: list[Point] = []
    try:
        for block in blocks:
            for batch in batches:
                layout = Layout(block, batch, args.gap)
                iters = min(args.num_iter, max(5, args.max_bytes_per_point // (block * batch)))
                rounds = min(args.rounds, iters)
                warmup = min(args.warmup_iter, max(1, iters // 10))
                samples = {t.name: Samples() for t in transports}
                for r in range(rounds):
                    for t in list(transports):
                        steps = [t.iteration(args.op_type, layout, i) for i in range(args.num_threads)]
                        share = iters // rounds + (1 if r < iters % rounds else 0)
                        try:
                            got = time_iterations(steps, share, warmup if r == 0 else 1, t.target_cpu)
                            samples[t.name].add(got)
                        except Exception as exc:
                            if isinstance(t, MoriTransport):
                                raise
                            # A comparison transport that breaks is reported, not fatal to the run.
                            notes[t.name] = f"failed at block={block} batch={batch}: {exc}; not measured further"
                            log.warning("%s", notes[t.name])
                            transports.remove(t)
                            del samples[t.name]
                            t.close()
                for name, got in samples.items():
                    point = summarize(name, args.op_type, block, batch, args.num_threads, got)
                    points.append(point)
                    log.info("%s %s block=%d batch=%d: %.3f GB/s", name, args.op_type, block, batch, point.gbps)
    finally:
        for t in transports:
            t.close()

    if args.backend == "rdma":
        notes["rdma"] = (f"{transports[0].describe()}, {args.num_qp_per_transfer} endpoint(s) per peer, "
                         f"notification {'on' if args.enable_notification else 'off'}")  # fmt: skip
        sys.stdout.write(f"mori-io-bench {args.op_type}, {args.num_threads} thread(s), backend rdma\n")
    else:
        sys.stdout.write(f"mori-io-bench {args.op_type}, {args.num_threads} thread(s), {transports[0].describe()}\n")
    return _report(args, points, notes)


def _main_gpu(args: argparse.Namespace, blocks: list[int], batches: list[int], size: int) -> int:
    from mori.io._native import _C

    why = _C.gpu_unavailable_reason()
    if why:
        sys.stderr.write(f"GPU segments need a GPU: {why}\n")
        return 2
    if args.backend == "p2p" and (args.initiator_seg_type, args.target_seg_type) != ("VRAM", "VRAM"):
        sys.stderr.write("--backend p2p moves GPU memory only: both segment types must be VRAM\n")
        return 2
    from mori.io.bench.gpu import DeviceCopyCeiling, MoriGpuTransport

    notes: dict[str, str] = {
        "ceiling": "d2d-ceiling is cuMemcpyDtoDAsync of block x batch bytes on one GPU, timed with CUDA events "
        "(median); d2d-host is the same copy timed on the host until cuStreamSynchronize returns; GB/s counts "
        "bytes copied once, like the engine's columns",
    }
    engine = MoriGpuTransport(size, args.num_data_conns, args.backend == "p2p", args.initiator_seg_type,
                              args.target_seg_type, args.device, args.target_device)  # fmt: skip
    ceilings = [] if args.skip_ceiling else [DeviceCopyCeiling(size, args.device, host_timed=h) for h in (False, True)]
    points: list[Point] = []
    try:
        notes[f"{engine.name} validated"] = str(engine.validate())
        for block in blocks:
            for batch in batches:
                layout = Layout(block, batch, args.gap)
                iters = min(args.num_iter, max(5, args.max_bytes_per_point // (block * batch)))
                warmup = min(args.warmup_iter, max(1, iters // 10))
                steps = [engine.iteration(args.op_type, layout, i) for i in range(args.num_threads)]
                points.append(measure(engine.name, args.op_type, block, batch, steps, iters, warmup))
                points.extend(c.point(args.op_type, block, batch, iters, warmup) for c in ceilings)
    finally:
        engine.close()
        for c in ceilings:
            c.close()
    sys.stdout.write(f"mori-io-bench {args.op_type}, backend {args.backend}, {args.initiator_seg_type} -> "
                     f"{args.target_seg_type}, {args.num_threads} thread(s)\n")  # fmt: skip
    return _report(args, points, notes)


if __name__ == "__main__":
    sys.exit(main())


def idle_cpu(transport: MoriTransport, seconds: float) -> str:
    """CPU both mori-io processes spend while their engines are connected and nothing moves."""
    import time

    mine, theirs = time.process_time(), transport.target_cpu()
    time.sleep(seconds)
    mine, theirs = time.process_time() - mine, transport.target_cpu() - theirs
    return (f"initiator {100 * mine / seconds:.2f} %, target {100 * theirs / seconds:.2f} % of one core "
            f"over {seconds:g} s with the link open and no transfer")  # fmt: skip


def _report(args: argparse.Namespace, points: list[Point], notes: dict[str, str]) -> int:
    """Prints the tables and notes under the header already written, and writes the JSON."""
    sys.stdout.write(report.table(points) + "\n")
    ratios = report.ratios(points)
    if ratios:
        sys.stdout.write("\n" + ratios + "\n")
    for key, value in notes.items():
        sys.stdout.write(f"{key}: {value}\n")
    if args.json:
        config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        report.write_json(args.json, config, points, notes)
    return 0
