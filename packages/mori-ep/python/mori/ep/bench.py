# SPDX-License-Identifier: MIT
"""``mori-ep-bench``: dispatch/combine time and bandwidth across N local PEs, as MORI and DeepEP
measure them (the README's main job).

Every PE dispatches its tokens (DeepSeek-V3 shape by default: hidden 7168, top-8 of 256 experts,
fp8 tokens with 56 fp32 scales) and combines bf16 expert outputs (the dispatched rows, an identity
expert). Bandwidth is MORI's: received rows x hidden x element size / time, per PE; the table
gives the mean over PEs (MORI's "algo BW") and the sum (the aggregate, which is what several PEs
sharing one GPU compete for). On the GPU, times are CUDA-graph replays between device barriers,
medians over iterations; on the cpu backend, wall times of the calls. The physical traffic (every
byte read and written, which MORI's count halves) is set against a device copy of the same size
measured in the same run: the ceiling of anything that moves bytes through one GPU's memory.

The inter-node kernel types run with ``--gpu-per-node`` PEs per host (default half the PEs: two
"hosts" on one machine, through mori-shmem's node-id override, so every record that crosses hosts
takes the remote transport). Their rows add the network traffic as MORI's inter-node benchmark
counts it: RDMA algo bandwidth = unique (token, destination host) pairs, the local host included,
x hidden x element size / time (DeepEP's count), and the bytes our records and replies actually put
on the network.

Every run verifies what it timed unless ``--no-verify``: each PE checks the outputs of the last
timed iteration of every case against :mod:`mori.ep.reference` (bench_verify.py), a mismatch
fails the run, and the report says ``"verified"``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mori.bench_report import Column, add_json, add_world_size, progress, table, write_json
from mori.ep import bench_verify, reference
from mori.ep import workload as wl
from mori.ep.workload import Workload
from mori.shmem.proxy_hazards import NEEDED_ENV

logger = logging.getLogger("mori.ep.bench")

KERNEL_TYPES = {"IntraNode": 0, "InterNode": 1, "InterNodeV1": 2, "InterNodeV1LL": 3, "AsyncLL": 4, "IntraNodeLL": 5}
_INTER_NODE = {"InterNode", "InterNodeV1", "InterNodeV1LL", "AsyncLL"}
#: GPU clock cycles (about 200 us) each timed iteration starts with; see _time_case.
_HOLD_CYCLES = 400_000
_FP8 = "float8_e4m3fn"
#: --dispatch-dtype names of block-scaled payloads (mori.ep.payload_formats); fp4 is MXFP4.
PAYLOAD_DTYPES = {"fp4": "mxfp4", "mxfp4": "mxfp4", "nvfp4": "nvfp4", "mxfp8": "mxfp8"}


def _copy_ceiling_gbps(device: Any, nbytes: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written) of one PE alone, GB/s."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)) * 1e-3)
    return 2 * nbytes / statistics.median(times) / 1e9


def _time_case(
    op: Any,
    x: Any,
    weights: Any,
    scales: Any,
    indices: Any,
    expert_out: Any,
    expert_weights: Any,
    identity_expert: Callable[[Any], None],
    block_num: int,
    warp_per_block: int,
    *,
    gpu: bool,
    iterations: int,
    warmup: int,
    status: str | None,
) -> tuple[dict[str, list[float]], Any, Any]:
    """Seconds per dispatch and per combine, each iteration starting with every PE together, and
    the outputs (op buffers) of dispatch and combine, which hold the last timed iteration's
    results. Between the phases, untimed, ``identity_expert`` puts this dispatch's rows where
    combine reads them (the row order may change from one dispatch to the next)."""
    import torch

    import mori.shmem as shmem

    split = op.config.kernel_type.name == "AsyncLL"  # its send and receive halves, back to back

    def run_dispatch() -> Any:
        outputs = op.dispatch(x, weights, scales, indices, block_num=block_num, warp_per_block=warp_per_block)
        if split:
            op.dispatch_recv()
        return outputs

    def run_combine() -> Any:
        outputs = op.combine(expert_out, expert_weights, indices, block_num=block_num, warp_per_block=warp_per_block)
        if split:
            op.combine_recv()
        return outputs

    dispatch_s: list[float] = []
    combine_s: list[float] = []
    if not gpu:
        dispatched = combined = None
        for i in range(iterations + warmup):
            shmem.shmem_barrier_all()
            started = time.perf_counter()
            dispatched = run_dispatch()
            middle = time.perf_counter()
            identity_expert(dispatched)
            shmem.shmem_barrier_all()
            restarted = time.perf_counter()
            combined = run_combine()
            ended = time.perf_counter()
            if i >= warmup:
                dispatch_s.append(middle - started)
                combine_s.append(ended - restarted)
            if status:
                progress(status, i + 1, iterations + warmup)
        op.check_error()
        return {"dispatch_s": dispatch_s, "combine_s": combine_s}, dispatched, combined

    # CUDA graphs, as MORI's benchmark: the times are the kernels', not Python's launch path.
    graphs, captured = [], []
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        # Loads the kernels outside capture (compiling them on first use); dispatch, then combine:
        # the inter-node types refuse two combines without a dispatch between them.
        run_dispatch()
        run_combine()
    torch.cuda.current_stream().wait_stream(stream)
    for fn in (run_dispatch, run_combine):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured.append(fn())  # views of the op's buffers, which every replay writes
        graphs.append(graph)
    dispatched, combined = captured
    torch.cuda.synchronize()
    shmem.shmem_barrier_all()
    events = [[torch.cuda.Event(enable_timing=True) for _ in range(4)] for _ in range(iterations + warmup)]
    for i, ev in enumerate(events):
        # Keep the GPU busy while this process queues the iteration: otherwise the PE whose host
        # queues last starts late and every other PE's time includes its Python launch latency.
        torch.cuda._sleep(_HOLD_CYCLES)
        shmem.shmem_barrier_on_stream()  # every PE starts the dispatch together
        ev[0].record()
        graphs[0].replay()
        ev[1].record()
        identity_expert(dispatched)
        shmem.shmem_barrier_on_stream()
        ev[2].record()
        graphs[1].replay()
        ev[3].record()
        if status:
            progress(status, i + 1, iterations + warmup)
    torch.cuda.synchronize()
    for ev in events[warmup:]:
        dispatch_s.append(ev[0].elapsed_time(ev[1]) * 1e-3)
        combine_s.append(ev[2].elapsed_time(ev[3]) * 1e-3)
    op.check_error()
    return {"dispatch_s": dispatch_s, "combine_s": combine_s}, dispatched, combined


def _identity_expert(expert_in: Any, total: int, dispatched: Any) -> None:
    """The identity expert: the received rows of ``dispatched``, in the combine dtype."""
    expert_in.copy_(dispatched[0][:total])


def _dequantising_expert(expert_in: Any, w: Workload, total: int, combine_dtype: Any, dispatched: Any) -> None:
    """The identity expert of a block-scaled payload: the received rows of ``dispatched`` (out,
    weights, scales, ...) dequantised, anew on every call: a replay receives the same rows, but
    the order in which PEs reserve slots, and so which slot holds which row, varies."""
    rows, scales = dispatched[0][:total], dispatched[2][:total]
    expert_in.copy_(reference.identity_expert(w, rows, scales, combine_dtype))


def combine_row_bytes(hidden: int, elem_bytes: int, quant: str, quant_blocks: int) -> int:
    """Bytes of one combine row as it moves: the wire row of the combine format plus its block scales."""
    if quant == "none":
        return hidden * elem_bytes
    wire = hidden // 2 if quant == "fp4_blockwise" else hidden
    return wire + 4 * quant_blocks


def _profiled_call(
    op: Any, x: Any, weights: Any, scales: Any, indices: Any, expert_out: Any, expert_weights: Any
) -> bytes:
    """One dispatch + combine recorded into a cleared trace buffer; the buffer's bytes."""
    import torch

    import mori.shmem as shmem
    import mori.viz

    trace = op.get_debug_time_buf()
    mori.viz.reset(trace)
    torch.cuda.synchronize()
    shmem.shmem_barrier_all()
    op.dispatch(x, weights, scales, indices)
    op.combine(expert_out, expert_weights, indices)
    op.check_error()
    return bytes(trace.cpu().numpy().tobytes())


def write_profile(prefix: Path, cases: list[Workload], results: list[dict[str, Any]]) -> list[Path]:
    """A Perfetto trace (all PEs, one process track each), a PNG timeline and a per-slot summary
    per case, from the buffers the PEs recorded."""
    import mori.viz
    from mori.ep.kernels import SLOTS_FILE

    table = mori.viz.SlotTable.from_json(SLOTS_FILE)
    written = []
    for index, w in enumerate(cases):
        buffers = [r["traces"][index] for r in results]
        stem = prefix.with_name(f"{prefix.name}-{w.max_tokens}tok")
        mori.viz.export_to_perfetto(buffers, stem.with_suffix(".json"), table)
        written.append(stem.with_suffix(".json"))
        try:
            written.append(mori.viz.plot_timeline(buffers, stem.with_suffix(".png"), table))
        except mori.viz.PlotUnavailableError as exc:
            logger.warning("no PNG: %s", exc)
        logger.info(
            "%d tokens/PE, per-slot device time:\n%s",
            w.max_tokens,
            mori.viz.format_summary(mori.viz.summarize(buffers, table)),
        )
    return written


def network_traffic(indices: Any, rank: int, experts_per_rank: int, per_host: int, group: int) -> dict[str, int]:
    """What one PE's dispatch puts between hosts: ``rdma_tokens``, the unique (token, destination
    host) pairs, its own host included (MORI's and DeepEP's count), and ``network_records``, the
    records this PE sends to a proxy on another host (one per token and destination routing node
    of ``group`` PEs); combine sends back as many replies."""
    import torch

    picked = indices >= 0
    pe = torch.where(picked, indices // experts_per_rank, -1)

    def distinct_per_token(values: Any) -> Any:
        # Sorted per row, a value counts when it differs from its left neighbour.
        ordered = torch.sort(torch.where(picked, values, -1), dim=1).values
        fresh = torch.ones_like(ordered, dtype=torch.bool)
        fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
        return fresh & (ordered >= 0), ordered

    fresh_hosts, _ = distinct_per_token(pe // per_host)
    fresh_nodes, nodes = distinct_per_token(pe // group)
    remote = (nodes * group) // per_host != rank // per_host
    return {
        "rdma_tokens": int(fresh_hosts.sum()),
        "network_records": int((fresh_nodes & remote).sum()),
    }


def pe_program(
    rank: int, nranks: int, uid: bytes, backend: str, cases: list[Workload], options: dict[str, Any]
) -> dict[str, Any]:
    """One PE of the benchmark: returns its timings per case."""
    import torch

    import mori.shmem as shmem
    from mori.ep import EpDispatchCombineConfig, EpDispatchCombineOp
    from mori.ep import workload as wl

    shmem.shmem_init_attr(shmem.MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)
    try:
        gpu = backend == "cuda"
        device = torch.device("cuda", shmem.shmem_cuda_device()) if gpu else torch.device("cpu")
        if gpu:
            torch.cuda.set_device(device)
        results: dict[str, Any] = {"cases": []}
        if gpu and rank == 0 and options["ceiling"]:
            results["copy_ceiling_gbps"] = _copy_ceiling_gbps(device, 1 << 30)
        combine_dtype = getattr(torch, options["combine_dtype"])
        for case_index, w in enumerate(cases):
            config = EpDispatchCombineConfig(
                data_type=getattr(torch, w.dtype),
                rank=rank,
                world_size=nranks,
                hidden_dim=w.hidden,
                scale_dim=w.scale_dim,
                scale_type_size=4 if w.scale_dim else 0,
                max_token_type_size=max(torch.empty(0, dtype=combine_dtype).element_size(), 1),
                max_num_inp_token_per_rank=w.max_tokens,
                num_experts_per_rank=w.experts_per_rank,
                num_experts_per_token=w.topk,
                kernel_type=options["kernel_type"],
                gpu_per_node=options["gpu_per_node"],
                use_external_inp_buf=not options["zero_copy"],
                quant_type=options["quant_type"],
            )
            op = EpDispatchCombineOp(config)
            x, weights, scales = wl.tokens(w, rank)
            indices = wl.routing(w, rank)
            x, weights, indices = x.to(device), weights.to(device), indices.to(device)
            scales = scales.to(device) if scales is not None else None
            out, out_weights, out_scales, _, total_recv = op.dispatch(x, weights, scales, indices)
            if op.config.kernel_type.name == "AsyncLL":
                op.dispatch_recv()
            total = int(total_recv.item())
            traffic: dict[str, int] = {}
            if op.config.routing_group:
                from mori.ep.layout import record_bytes, reply_bytes

                traffic = network_traffic(
                    indices.cpu(), rank, w.experts_per_rank, options["gpu_per_node"], op.config.routing_group
                )
                traffic["record_bytes"] = record_bytes(
                    x.shape[1] * x.element_size(),
                    w.topk,
                    scales.shape[1] * scales.element_size() if scales is not None else 0,
                )
                traffic["reply_bytes"] = reply_bytes(
                    w.hidden * torch.empty(0, dtype=combine_dtype).element_size(), w.topk
                )
            expert_out = reference.identity_expert(
                w, out[:total], None if out_scales is None else out_scales[:total], combine_dtype
            )
            # Where combine reads the expert outputs: the registered buffer with zero-copy.
            expert_in = (
                op.get_registered_combine_input_buffer(combine_dtype, w.hidden)[:total]
                if options["zero_copy"]
                else expert_out
            )
            identity_expert: Callable[[Any], None] = functools.partial(_identity_expert, expert_in, total)
            if w.payload != "none":
                identity_expert = functools.partial(_dequantising_expert, expert_in, w, total, combine_dtype)
            identity_expert((out, out_weights, out_scales))
            # Bytes of a row as it moves: payload + scales (dispatch), wire row + block scales (combine).
            dispatch_row = x.shape[1] * x.element_size() + (
                scales.shape[1] * scales.element_size() if scales is not None else 0
            )
            combine_row = combine_row_bytes(
                w.hidden, expert_out.element_size(), options["quant_type"], int(op.layout.quant_blocks)
            )

            for geometry in options["geometries"]:
                block_num, warp_per_block = geometry
                shape = f"{block_num} x {warp_per_block}" if block_num > 0 else "default geometry"
                status = f"case {case_index + 1}/{len(cases)}: {w.max_tokens} tokens, {shape}"
                timings, dispatched, combined = _time_case(
                    op, x, weights, scales, indices, expert_out, out_weights[:total], identity_expert,
                    block_num, warp_per_block, gpu=gpu, iterations=options["iterations"], warmup=options["warmup"],
                    status=status if rank == 0 else None,
                )  # fmt: skip
                bench_verify.corrupt(options["corrupt"], rank, dispatched, combined, total)
                verification = (
                    bench_verify.verify(
                        op, w, rank, dispatched, combined, combine_dtype=combine_dtype,
                        quant=options["quant_type"], gpu_per_node=options["gpu_per_node"],
                    )
                    if options["verify"]
                    else None
                )  # fmt: skip
                results["cases"].append(
                    {
                        "case": case_index,
                        "geometry": {
                            "dispatch": op.get_launch_config(
                                True, block_num, -1, warp_per_block, dtype=x.dtype, num_tokens=w.max_tokens
                            ),
                            "combine": op.get_launch_config(
                                False,
                                block_num,
                                -1,
                                warp_per_block,
                                dtype=combine_dtype,
                                num_tokens=w.max_tokens,
                                zero_copy=options["zero_copy"],
                            ),
                        },
                        "tokens": x.shape[0],
                        "total_recv": total,
                        "dispatch_elem_bytes": x.shape[1] * x.element_size() / w.hidden,  # fp4: 0.5
                        "dispatch_row_bytes": dispatch_row,
                        "combine_row_bytes": combine_row,
                        "combine_elem_bytes": torch.empty(0, dtype=combine_dtype).element_size(),
                        **traffic,
                        **timings,
                        "verification": verification,
                    }
                )
            if options["profile"]:
                results.setdefault("traces", []).append(
                    _profiled_call(op, x, weights, scales, indices, expert_out, out_weights[:total])
                )
            op.close()
        return results
    finally:
        shmem.shmem_finalize()


def summarize(w: Workload, per_rank: list[dict[str, Any]], ceiling_gbps: float | None) -> dict[str, Any]:
    """MORI's bandwidth per PE, its mean and sum over PEs, and the physical traffic against the ceiling."""
    rows: dict[str, Any] = {"tokens": w.max_tokens, "world_size": w.world_size, "geometry": per_rank[0]["geometry"]}
    for phase, elem_key in (("dispatch", "dispatch_elem_bytes"), ("combine", "combine_elem_bytes")):
        medians = [statistics.median(r[f"{phase}_s"]) for r in per_rank]
        bandwidth = [r["total_recv"] * w.hidden * r[elem_key] / t / 1e9 for r, t in zip(per_rank, medians, strict=True)]
        # Physical: each received row written once (dispatch) / read once (combine), each local
        # token read once (dispatch) / written once (combine).
        physical = sum((r["total_recv"] + r["tokens"]) * w.hidden * r[elem_key] for r in per_rank) / max(medians) / 1e9
        rows[phase] = {
            "median_us_per_rank": [t * 1e6 for t in medians],
            "time_us": max(medians) * 1e6,
            "bw_per_rank_gbps": bandwidth,
            "algo_bw_gbps": statistics.fmean(bandwidth),
            "aggregate_gbps": sum(bandwidth),
            # The same rows counted as they move: payload + scales (dispatch), wire row + block scales (combine).
            "wire_algo_bw_gbps": statistics.fmean(
                r["total_recv"] * r[f"{phase}_row_bytes"] / t / 1e9 for r, t in zip(per_rank, medians, strict=True)
            ),
            "physical_gbps": physical,
            "percent_of_copy_ceiling": 100 * physical / ceiling_gbps if ceiling_gbps else None,
        }
        if "rdma_tokens" in per_rank[0]:
            wire = "record_bytes" if phase == "dispatch" else "reply_bytes"
            rows[phase]["rdma_algo_bw_gbps"] = statistics.fmean(
                r["rdma_tokens"] * w.hidden * r[elem_key] / t / 1e9 for r, t in zip(per_rank, medians, strict=True)
            )
            rows[phase]["network_gbps"] = statistics.fmean(
                r["network_records"] * r[wire] / t / 1e9 for r, t in zip(per_rank, medians, strict=True)
            )
            rows[phase]["network_bytes_per_pe"] = statistics.fmean(r["network_records"] * r[wire] for r in per_rank)
    rows["total_recv"] = [r["total_recv"] for r in per_rank]
    checks = [r["verification"] for r in per_rank]
    rows["verified"] = all(c is not None and c["ok"] for c in checks)
    rows["combine_tolerance"] = checks[0]["tolerance"] if checks[0] is not None else None
    rows["verify_s"] = max((c["seconds"] for c in checks if c is not None), default=0.0)
    return rows


#: Loopback connections of the socket copy that the inter-node rows are set against: the tcp
#: conduit's default streams per remote PE.
SOCKET_STREAMS = 2


def add_socket_ceiling(summaries: list[dict[str, Any]]) -> None:
    """For each inter-node row: a plain loopback socket copy (SOCKET_STREAMS connections, one
    direction, another process) of the bytes one PE puts on the network in that call, measured now;
    ``socket_gbps`` and ``network_over_socket`` (the network GB/s per PE over it)."""
    from mori.shmem.bench.remote import _remote_iterations, _socket_copy

    sizes = sorted(
        {max(1, round(s[phase]["network_bytes_per_pe"])) for s in summaries for phase in ("dispatch", "combine")}
    )
    copied = _socket_copy(sizes, SOCKET_STREAMS, pingpongs=1, repeats=3)
    gbps = {
        size: size * _remote_iterations(size) / seconds / 1e9
        for size, seconds in zip(sizes, copied["seconds"], strict=True)
    }
    for s in summaries:
        for phase in ("dispatch", "combine"):
            row = s[phase]
            row["socket_gbps"] = gbps[max(1, round(row["network_bytes_per_pe"]))]
            row["network_over_socket"] = row["network_gbps"] / row["socket_gbps"]


def _verification_line(summaries: list[dict[str, Any]], verify: bool, failures: list[str]) -> str:
    if not verify:
        return "NOT verified (--no-verify): the outputs of the timed iterations were not checked"
    if failures:
        return f"verification FAILED ({len(failures)} PE x case(s)): exit status 1, the errors follow"
    tolerances = sorted({s["combine_tolerance"]["why"] for s in summaries})
    return (
        "verified: on every PE the last timed dispatch and combine of every row above match the reference "
        f"(mori.ep.reference); combine: {'; '.join(tolerances)}; the checks took up to "
        f"{max(s['verify_s'] for s in summaries):.1f} s per PE and case, untimed"
    )


_COLUMNS = (
    Column("tokens", 7), Column("blocks x warps", 14), Column("phase", 9), Column("time us", 9, ".1f"),
    Column("GB/s/PE", 9, ".1f"), Column("aggr GB/s", 10, ".1f"), Column("phys GB/s", 10, ".1f"),
    Column("% ceiling", 10),
)  # fmt: skip
_NETWORK_COLUMNS = (
    Column("RDMA algo GB/s", 15, ".2f"), Column("net GB/s/PE", 12, ".2f"), Column("socket GB/s", 12, ".2f"),
    Column("net/socket", 11, ".0%"),
)  # fmt: skip


def _table(summaries: list[dict[str, Any]], ceiling: float | None, verification: str) -> str:
    network = "rdma_algo_bw_gbps" in summaries[0]["dispatch"]
    cells: list[list[object]] = []
    for s in summaries:
        for phase in ("dispatch", "combine"):
            p = s[phase]
            pct = f"{p['percent_of_copy_ceiling']:.0f}%" if p["percent_of_copy_ceiling"] is not None else "-"
            geometry = f"{s['geometry'][phase][0]} x {s['geometry'][phase][2]}"
            line = [
                s["tokens"],
                geometry,
                phase,
                p["time_us"],
                p["algo_bw_gbps"],
                p["aggregate_gbps"],
                p["physical_gbps"],
                pct,
            ]
            if network:
                line += [p["rdma_algo_bw_gbps"], p["network_gbps"]]
                if "socket_gbps" in p:
                    line += [p["socket_gbps"], p["network_over_socket"]]
            cells.append(line)
    lines = table(_COLUMNS + (_NETWORK_COLUMNS if network else ()), cells)
    if ceiling:
        lines.append(f"copy ceiling (one PE, torch copy_ of 1 GiB, read + written): {ceiling:.0f} GB/s")
    lines.append(verification)
    return "\n".join(lines)


#: The (block_num, warp_per_block) pairs --tune tries.
TUNING_GRID: list[tuple[int, int]] = [(b, w) for b in (16, 32, 64, 128, 256) for w in (4, 8, 16)]


def write_tuning_files(
    directory: Path, summaries: list[dict[str, Any]], args: argparse.Namespace, backend: str
) -> list[Path]:
    """The fastest geometry per (phase, tokens) as tuning rules, in MORI's file naming."""
    import torch

    from mori.ep.launch_config import gpu_model_name, tuning_file_name

    if backend != "cuda":
        raise SystemExit("--tune writes GPU tuning files; run it on the cuda backend")
    major, minor = torch.cuda.get_device_capability()
    arch, gpu = f"sm{major}{minor}", gpu_model_name(torch.cuda.get_device_name())
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for phase in ("dispatch", "combine"):
        best: dict[int, dict[str, Any]] = {}
        for s in summaries:
            if s["tokens"] not in best or s[phase]["time_us"] < best[s["tokens"]][phase]["time_us"]:
                best[s["tokens"]] = s
        rules = []
        for tokens, s in sorted(best.items()):
            rule = {
                "dtype": args.dtype if phase == "dispatch" else args.combine_dtype,
                "num_tokens": tokens,
                "hidden_dim": args.hidden,
                "topk": args.topk,
                "block_num": s["geometry"][phase][0],
                "rdma_block_num": 0,
                "warp_per_block": s["geometry"][phase][2],
                "bandwidth_gbps": round(s[phase]["algo_bw_gbps"], 1),
                "time_us": round(s[phase]["time_us"], 1),
            }
            if phase == "combine":
                rule |= {"zero_copy": bool(args.zero_copy), "quant_type": args.quant_type}
            rules.append(rule)
        path = directory / tuning_file_name(arch, gpu, args.kernel_type, args.world_size, phase)
        existing = json.loads(path.read_text())["rules"] if path.exists() else []
        kept = [r for r in existing if not any(_same_rule(r, new) for new in rules)]
        path.write_text(json.dumps({"rules": kept + rules}, indent=1) + "\n")
        written.append(path)
    return written


def _same_rule(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("dtype", "num_tokens", "hidden_dim", "topk", "zero_copy", "quant_type")
    return all(a.get(k) == b.get(k) for k in keys)


def _corruption(text: str) -> bench_verify.Corruption:
    try:
        return bench_verify.parse_corruption(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mori-ep-bench", description=__doc__.split("\n\n")[0])
    add_world_size(parser, 8)
    parser.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[4096, 128], help="tokens per PE, one case each")
    parser.add_argument("--hidden", type=int, default=7168)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--experts", type=int, default=256, help="experts in total")
    parser.add_argument(
        "--dtype",
        "--dispatch-dtype",
        dest="dtype",
        default=_FP8,
        help="dispatch dtype (default float8_e4m3fn), or a block-scaled payload: fp4 (= mxfp4), mxfp4, nvfp4, "
        "mxfp8 (bf16 tokens quantised, their scales replace --scale-dim's; the expert dequantises)",
    )
    parser.add_argument("--combine-dtype", default="bfloat16")
    parser.add_argument("--scale-dim", type=int, default=56, help="fp32 scales per token (0: none)")
    parser.add_argument("--kernel-type", choices=sorted(KERNEL_TYPES), default="IntraNode")
    parser.add_argument(
        "--gpu-per-node",
        type=int,
        default=0,
        help="inter-node kernel types: PEs per host (0: half the PEs, two hosts); hosts past the first are "
        "reached through mori-shmem's remote transport (MORI_SHMEM_PES_PER_NODE)",
    )
    parser.add_argument(
        "--quant-type",
        "--combine-quant",
        dest="quant_type",
        default="none",
        help="combine wire format: none, fp8_direct_cast, fp8_blockwise, fp4_blockwise "
        "(needs --zero-copy 0 unless none)",
    )
    parser.add_argument("--zero-copy", type=int, choices=(0, 1), default=1)
    parser.add_argument("--routing", choices=("random", "hot"), default="random")
    parser.add_argument("--block-num", type=int, default=-1, help="-1: the launch mode decides")
    parser.add_argument("--warp-per-block", type=int, default=-1, help="-1: the launch mode decides")
    parser.add_argument(
        "--launch-mode",
        choices=("AUTO", "MANUAL"),
        default="AUTO",
        help="MORI_EP_LAUNCH_CONFIG_MODE of the PEs (AUTO: the shipped tuning files where they match)",
    )
    parser.add_argument("--iterations", type=int, default=None, help="timed iterations (default 50 GPU, 3 cpu)")
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument(
        "--sm-share", type=int, default=0, help="GPU: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per PE (0: unset)"
    )
    parser.add_argument("--heap", default=None, help="MORI_SHMEM_HEAP_SIZE per PE (default: what the op needs + 64M)")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip checking the last timed iteration of every case against the reference on every PE "
        '(the report then says "verified": false)',
    )
    # Test-only fault injection (bench_verify.py): damages one output row on one PE before the check.
    parser.add_argument("--test-only-corrupt", type=_corruption, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=1800.0)
    add_json(parser, Path("mori-ep-bench.json"))
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="PREFIX",
        help="GPU: record one dispatch + combine per case with mori-viz trace points (needs mori-viz) and write "
        "PREFIX-<tokens>tok.json (Perfetto) and .png",
    )
    parser.add_argument(
        "--tune",
        type=Path,
        default=None,
        metavar="DIR",
        help="sweep block_num x warp_per_block; write the winners into DIR as tuning files for "
        "MORI_EP_LAUNCH_CONFIG_MODE=AUTO",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import mori.shmem as shmem
    from mori.ep.config import EpDispatchCombineConfig, EpDispatchCombineKernelType
    from mori.ep.op import EpDispatchCombineOp
    from mori.shmem.testing import run_pes

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse_args(argv)
    backend = args.backend
    if backend == "auto":
        backend = "cuda" if shmem.shmem_cuda_available() else "cpu"
    gpu = backend == "cuda"
    if gpu and args.world_size > 1 and not Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")).exists():
        logger.warning(
            "no CUDA MPS daemon found: PEs that share a GPU then time-slice it and every wait for a peer "
            "takes milliseconds; start one with `nvidia-cuda-mps-control -d` (docs/developer-guide/gpu.md)"
        )
    iterations = args.iterations if args.iterations is not None else (50 if gpu else 3)
    warmup = args.warmup if args.warmup is not None else (10 if gpu else 1)
    if iterations < 1 or warmup < 0:
        raise SystemExit(f"--iterations={iterations} must be >= 1 (the last one is verified), --warmup={warmup} >= 0")
    if args.experts % args.world_size:
        raise SystemExit(f"--experts={args.experts} must be a multiple of --world-size={args.world_size}")
    cases = [
        Workload(
            world_size=args.world_size,
            max_tokens=tokens,
            hidden=args.hidden,
            topk=args.topk,
            experts_per_rank=args.experts // args.world_size,
            dtype=args.dtype,
            scale_dim=args.scale_dim,
            routing=args.routing,
            tokens=tokens,
        )
        for tokens in args.max_tokens
    ]
    payload = PAYLOAD_DTYPES.get(args.dtype)
    if payload is not None:
        if args.hidden % 128:
            raise SystemExit(
                f"--hidden={args.hidden}: {args.dtype} payloads need a multiple of 128 (whole 4-byte scale rows)"
            )
        cases = [wl.with_payload(w, payload) for w in cases]
    inter_node = args.kernel_type in _INTER_NODE
    gpu_per_node = args.gpu_per_node or (max(1, args.world_size // 2) if inter_node else 8)
    need = max(
        EpDispatchCombineOp.required_heap_bytes(
            EpDispatchCombineConfig(
                data_type=None, rank=0, world_size=args.world_size, hidden_dim=args.hidden, scale_dim=w.scale_dim,
                scale_type_size=4, max_token_type_size=2, max_num_inp_token_per_rank=w.max_tokens,
                num_experts_per_rank=w.experts_per_rank, num_experts_per_token=args.topk, quant_type=args.quant_type,
                kernel_type=EpDispatchCombineKernelType(KERNEL_TYPES[args.kernel_type]), gpu_per_node=gpu_per_node,
            )
        )
        for w in cases
    )  # fmt: skip
    heap = args.heap or f"{math.ceil(need / (1 << 20)) + 64}M"
    env: dict[str, str | None] = {
        "MORI_SHMEM_BACKEND": backend,
        "MORI_SHMEM_HEAP_SIZE": heap,
        "MORI_EP_LAUNCH_CONFIG_MODE": "MANUAL" if args.tune else args.launch_mode,
    }
    if inter_node:
        env["MORI_SHMEM_PES_PER_NODE"] = str(gpu_per_node)
        env.update(NEEDED_ENV)  # what the inter-node types need on the GPU
    if args.profile:
        if not gpu:
            raise SystemExit("--profile records GPU kernels; run it on the cuda backend")
        env["MORI_ENABLE_PROFILER"] = "1"
    if gpu and args.sm_share:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(args.sm_share)
    options = {
        "combine_dtype": args.combine_dtype,
        "kernel_type": KERNEL_TYPES[args.kernel_type],
        "gpu_per_node": gpu_per_node,
        "zero_copy": bool(args.zero_copy),
        "quant_type": args.quant_type,
        "iterations": iterations,
        "warmup": warmup,
        "ceiling": True,
        "geometries": TUNING_GRID if args.tune else [(args.block_num, args.warp_per_block)],
        "profile": args.profile is not None,
        "verify": not args.no_verify,
        "corrupt": args.test_only_corrupt,
    }
    logger.info(
        "mori-ep-bench: %d PEs on the %s backend, %s tokens/PE, hidden %d, top-%d of %d experts, "
        "%s dispatch + %s combine, heap %s/PE",
        args.world_size, backend, args.max_tokens, args.hidden, args.topk, args.experts,
        args.dtype, args.combine_dtype, heap,
    )  # fmt: skip
    results = run_pes(pe_program, args.world_size, backend, cases, options, env=env, timeout=args.timeout)
    ceiling = results[0].get("copy_ceiling_gbps")
    summaries = [
        summarize(cases[entry["case"]], [r["cases"][i] for r in results], ceiling)
        for i, entry in enumerate(results[0]["cases"])
    ]
    failures = [
        bench_verify.failure_message(
            rank, args.kernel_type, cases[entry["case"]].max_tokens, entry["geometry"]["dispatch"],
            entry["verification"]["mismatch"],
        )
        for rank, r in enumerate(results)
        for entry in r["cases"]
        if entry["verification"] is not None and not entry["verification"]["ok"]
    ]  # fmt: skip
    if inter_node:
        add_socket_ceiling(summaries)
    sys.stdout.write(_table(summaries, ceiling, _verification_line(summaries, options["verify"], failures)) + "\n")
    verification = {
        "checked": list(bench_verify.CHECKED) if options["verify"] else [],
        "when": bench_verify.WHEN if options["verify"] else None,
        "combine_tolerance": {str(s["tokens"]): s["combine_tolerance"] for s in summaries},
        "failures": failures,
    }
    if failures:
        for message in failures:
            logger.error("%s", message)
        _write_report(args, backend, options, cases, ceiling, summaries, results, verification)
        return 1
    if args.tune:
        for path in write_tuning_files(args.tune, summaries, args, backend):
            logger.info("wrote %s", path)
    if args.profile:
        for path in write_profile(args.profile, cases, results):
            logger.info("wrote %s", path)
        for r in results:
            r.pop("traces")
    _write_report(args, backend, options, cases, ceiling, summaries, results, verification)
    return 0


def _write_report(
    args: argparse.Namespace,
    backend: str,
    options: dict[str, Any],
    cases: list[Workload],
    ceiling: float | None,
    summaries: list[dict[str, Any]],
    results: list[dict[str, Any]],
    verification: dict[str, Any],
) -> None:
    report = {
        "backend": backend,
        "kernel_type": args.kernel_type,
        "verified": options["verify"] and not verification["failures"],
        "verification": verification,
        "options": {**options, "corrupt": None if options["corrupt"] is None else asdict(options["corrupt"])},
        "workloads": [asdict(w) for w in cases],
        "copy_ceiling_gbps": ceiling,
        "results": summaries,
        "raw": results,
    }
    write_json(args.json, report, indent=1)
    logger.info("wrote %s", args.json)


if __name__ == "__main__":
    raise SystemExit(main())
