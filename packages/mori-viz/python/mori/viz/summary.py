# SPDX-License-Identifier: MIT
"""Device elapsed-time summaries per slot: how long each phase took, per warp and overall."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.viz.intervals import pair
from mori.viz.slots import SlotMap, slot_name
from mori.viz.sources import load_traces, slot_names


@dataclass(frozen=True)
class SlotSummary:
    """Durations of every closed slice of one slot, in nanoseconds of %globaltimer.

    ``span_ns`` is wall time from the first BEGIN to the last END of the slot over every warp and
    PE (how long the phase kept the GPU busy); the others are statistics of single slices.
    """

    slot: int
    name: str
    count: int
    warps: int
    total_ns: int
    mean_ns: float
    min_ns: int
    p50_ns: float
    p99_ns: float
    max_ns: int
    span_ns: int


def summarize(trace_buffer: Any, slot_map: SlotMap = None, *, check_table: bool = True) -> list[SlotSummary]:
    """One :class:`SlotSummary` per slot that has closed slices, by slot id; ``trace_buffer`` and
    ``slot_map`` as for :func:`mori.viz.export_to_perfetto`."""
    traces = load_traces(trace_buffer)
    names = slot_names(traces, slot_map, check_table=check_table)
    by_slot: dict[int, list[tuple[int, int, tuple[int, int]]]] = {}
    for piece in pair(traces).slices:
        by_slot.setdefault(piece.slot, []).append((piece.start_ns, piece.end_ns, (piece.warp.pe, piece.warp.warp_slot)))
    result: list[SlotSummary] = []
    for slot in sorted(by_slot):
        rows = by_slot[slot]
        starts = np.array([r[0] for r in rows], dtype=np.int64)
        ends = np.array([r[1] for r in rows], dtype=np.int64)
        durations = ends - starts
        result.append(
            SlotSummary(
                slot=slot,
                name=slot_name(names, slot),
                count=len(rows),
                warps=len({r[2] for r in rows}),
                total_ns=int(durations.sum()),
                mean_ns=float(durations.mean()),
                min_ns=int(durations.min()),
                p50_ns=float(np.percentile(durations, 50)),
                p99_ns=float(np.percentile(durations, 99)),
                max_ns=int(durations.max()),
                span_ns=int(ends.max() - starts.min()),
            )
        )
    return result


def format_summary(summaries: list[SlotSummary]) -> str:
    """A fixed-width table of ``summaries`` in microseconds."""
    header = ("slot", "count", "warps", "mean us", "p50 us", "p99 us", "max us", "span us")
    rows = [
        (
            s.name,
            str(s.count),
            str(s.warps),
            f"{s.mean_ns / 1e3:.3f}",
            f"{s.p50_ns / 1e3:.3f}",
            f"{s.p99_ns / 1e3:.3f}",
            f"{s.max_ns / 1e3:.3f}",
            f"{s.span_ns / 1e3:.3f}",
        )
        for s in summaries
    ]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
        for r in [header, *rows]
    ]
    return "\n".join(lines)
