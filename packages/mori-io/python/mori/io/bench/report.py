# SPDX-License-Identifier: MIT
"""The bench's table and JSON outputs."""

from __future__ import annotations

import json
import os
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mori._provenance import provenance
from mori.io.bench.runner import Point


def human(n: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def _rows(points: list[Point]) -> dict[tuple[int, int], dict[str, Point]]:
    rows: dict[tuple[int, int], dict[str, Point]] = {}
    for p in points:
        rows.setdefault((p.block_size, p.batch_size), {})[p.transport] = p
    return rows


def _cpu(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(points: list[Point]) -> str:
    """One line per (transport, block, batch): GB/s, iteration-time percentiles and CPU per GB."""
    head = (f"{'transport':>22} {'block':>7} {'batch':>6} {'GB/s':>8} {'p50 us':>9} {'p90 us':>9} {'p99 us':>9} "
            f"{'cpu s/GB init':>13} {'cpu s/GB tgt':>12}")  # fmt: skip
    lines = [head, "-" * len(head)]
    for (block, batch), by_name in _rows(points).items():
        for name, p in by_name.items():
            p90 = "-" if p.lat_p90_us is None else f"{p.lat_p90_us:.1f}"
            lines.append(f"{name:>22} {human(block):>7} {batch:>6} {p.gbps:>8.3f} {p.lat_p50_us:>9.1f} {p90:>9} "
                         f"{p.lat_p99_us:>9.1f} {_cpu(p.cpu_s_per_gb_initiator):>13} "
                         f"{_cpu(p.cpu_s_per_gb_target):>12}")  # fmt: skip
    return "\n".join(lines)


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
    head = (f"{'block':>7} {'batch':>6} {'p50 / socket':>12} {'p90 / socket':>12} {'GB/s / socket':>13} "
            f"{'GB/s / N streams':>16}")  # fmt: skip
    lines = ["mori-io against the same run's plain sockets:", head, "-" * len(head)]
    for r in rows:
        p90 = f"{r['p90_over_socket']:.2f}" if "p90_over_socket" in r else "-"
        streams = f"{r['gbps_over_streams']:.2f}" if "gbps_over_streams" in r else "-"
        lines.append(f"{human(r['block_size']):>7} {r['batch_size']:>6} {r['p50_over_socket']:>12.2f} {p90:>12} "
                     f"{r['gbps_over_socket']:>13.2f} {streams:>16}")  # fmt: skip
    return "\n".join(lines)


def write_json(path: Path, config: dict[str, Any], points: list[Point], notes: dict[str, str]) -> None:
    doc = {
        "tool": "mori-io-bench",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "config": config,
        "notes": notes,
        "points": [asdict(p) for p in points],
        "ratios": ratio_rows(points),
        "provenance": provenance(),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
