# SPDX-License-Identifier: MIT
"""The bench's table and JSON outputs."""

from __future__ import annotations

import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mori.bench_report import Column, human_size, optional
from mori.bench_report import table as format_table
from mori.bench_report import write_json as write_document
from mori.io.bench.runner import Point

_POINT_COLUMNS = (
    Column("transport", 22), Column("block", 7), Column("batch", 6), Column("GB/s", 8, ".3f"),
    Column("p50 us", 9, ".1f"), Column("p90 us", 9), Column("p99 us", 9, ".1f"), Column("cpu s/GB init", 13),
    Column("cpu s/GB tgt", 12),
)  # fmt: skip
_RATIO_COLUMNS = (
    Column("block", 7), Column("batch", 6), Column("p50 / socket", 12, ".2f"), Column("p90 / socket", 12),
    Column("GB/s / socket", 13, ".2f"), Column("GB/s / N streams", 16),
)  # fmt: skip


def _rows(points: list[Point]) -> dict[tuple[int, int], dict[str, Point]]:
    rows: dict[tuple[int, int], dict[str, Point]] = {}
    for p in points:
        rows.setdefault((p.block_size, p.batch_size), {})[p.transport] = p
    return rows


def table(points: list[Point]) -> str:
    """One line per (transport, block, batch): GB/s, iteration-time percentiles and CPU per GB."""
    cells = [
        (name, human_size(block), batch, p.gbps, p.lat_p50_us, optional(p.lat_p90_us, ".1f"), p.lat_p99_us,
         optional(p.cpu_s_per_gb_initiator, ".2f"), optional(p.cpu_s_per_gb_target, ".2f"))
        for (block, batch), by_name in _rows(points).items()
        for name, p in by_name.items()
    ]  # fmt: skip
    return "\n".join(format_table(_POINT_COLUMNS, cells))


def ratio_rows(points: list[Point]) -> list[dict[str, Any]]:
    """Same-run ratios of mori-io to the socket ceilings, per (block, batch): iteration-time
    percentiles over the one-stream round trip's same percentiles (lower is better), and GB/s over
    the one-stream and the N-stream copies (higher is better)."""
    out = []
    for (block, batch), by_name in _rows(points).items():
        mori = next((p for n, p in by_name.items() if n.startswith("mori-io")), None)
        one = by_name.get("socket-ceiling")
        if mori is None or one is None:
            continue
        many = next((p for n, p in by_name.items() if n.startswith("socket-") and n.endswith("-streams")), None)
        row: dict[str, Any] = {
            "block_size": block,
            "batch_size": batch,
            "p50_over_socket": mori.lat_p50_us / one.lat_p50_us,
        }
        if mori.lat_p90_us is not None and one.lat_p90_us is not None:
            row["p90_over_socket"] = mori.lat_p90_us / one.lat_p90_us
        row["gbps_over_socket"] = mori.gbps / one.gbps
        if many is not None:
            row["gbps_over_streams"] = mori.gbps / many.gbps
        out.append(row)
    return out


def ratios(points: list[Point]) -> str:
    """ratio_rows as a table; empty without a socket ceiling in the run."""
    rows = ratio_rows(points)
    if not rows:
        return ""
    cells = [
        (human_size(r["block_size"]), r["batch_size"], r["p50_over_socket"], optional(r.get("p90_over_socket"), ".2f"),
         r["gbps_over_socket"], optional(r.get("gbps_over_streams"), ".2f"))
        for r in rows
    ]  # fmt: skip
    return "\n".join(["mori-io against the same run's plain sockets:", *format_table(_RATIO_COLUMNS, cells)])


def write_json(path: Path, config: dict[str, Any], points: list[Point], notes: dict[str, str]) -> None:
    doc = {
        "tool": "mori-io-bench",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "config": config,
        "notes": notes,
        "points": [asdict(p) for p in points],
        "ratios": ratio_rows(points),
    }
    write_document(path, doc)
