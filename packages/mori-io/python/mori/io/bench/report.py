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


def table(points: list[Point]) -> str:
    """One row per (block, batch) with each transport's GB/s and mean per-iteration latency."""
    names = list(dict.fromkeys(p.transport for p in points))
    rows: dict[tuple[int, int], dict[str, Point]] = {}
    for p in points:
        rows.setdefault((p.block_size, p.batch_size), {})[p.transport] = p
    head = f"{'block':>7} {'batch':>6} " + " ".join(f"{n + ' GB/s':>20} {'lat us':>10}" for n in names)
    lines = [head, "-" * len(head)]
    for (block, batch), by_name in rows.items():
        cells = []
        for n in names:
            cell = by_name.get(n)
            cells.append(f"{cell.gbps:>20.3f} {cell.lat_us:>10.1f}" if cell else f"{'-':>20} {'-':>10}")
        lines.append(f"{human(block):>7} {batch:>6} " + " ".join(cells))
    return "\n".join(lines)


def write_json(path: Path, config: dict[str, Any], points: list[Point], notes: dict[str, str]) -> None:
    doc = {
        "tool": "mori-io-bench",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "config": config,
        "notes": notes,
        "points": [asdict(p) for p in points],
        "provenance": provenance(),
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
