# SPDX-License-Identifier: MIT
"""Chrome trace JSON (opened by ui.perfetto.dev and chrome://tracing) from trace buffers.

One track per warp. ``group_by="block"`` makes one process per (PE, block), named
``PE 0 / block 3``, holding its warps' tracks; ``group_by="pe"`` one process per PE whose tracks
are named ``block 3 / warp 1``. Slices are complete ("X") events with their nesting kept, instants
are thread-scoped "i" events; times are microseconds from the earliest event of all buffers
(``otherData.origin_globaltimer_ns`` keeps the absolute device time).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mori.viz.errors import InvalidArgumentError
from mori.viz.intervals import origin_ns, pair
from mori.viz.reader import Trace, WarpTrace
from mori.viz.slots import SlotMap, slot_name
from mori.viz.sources import load_traces, slot_names

_log = logging.getLogger("mori.viz")

GROUPINGS = ("block", "pe")


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote and what it had to leave out."""

    path: Path | None
    slices: int
    instants: int
    tracks: int
    orphan_ends: int  # END events whose BEGIN was lost (overwritten or never recorded)
    unclosed_begins: int  # BEGIN events never closed
    overwritten_events: int  # events lost to ring wrap-around
    dropped_warps: int  # warps that found no slot in their buffer


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


class _Tracks:
    """pid/tid numbering and the metadata events that name and order them."""

    def __init__(self, traces: list[Trace], group_by: str) -> None:
        warps = sorted((w for t in traces for w in t.warps), key=lambda w: (w.pe, w.block, w.warp, w.warp_slot))
        self.metadata: list[dict[str, Any]] = []
        self._ids: dict[tuple[int, int], tuple[int, int]] = {}
        processes: dict[tuple[int, ...], int] = {}
        for tid, warp in enumerate(warps, start=1):
            key = (warp.pe, warp.block) if group_by == "block" else (warp.pe,)
            if key not in processes:
                pid = processes[key] = len(processes) + 1
                name = f"PE {warp.pe} / block {warp.block}" if group_by == "block" else f"PE {warp.pe}"
                self.metadata += [
                    {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                    {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
                ]
            pid = processes[key]
            label = f"warp {warp.warp}" if group_by == "block" else f"block {warp.block} / warp {warp.warp}"
            self.metadata += [
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": tid,
                    "args": {"name": f"{label} (slot {warp.warp_slot}, SM {warp.smid})"},
                },
                {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}},
            ]
            self._ids[(warp.pe, warp.warp_slot)] = (pid, tid)
        self.count = len(warps)

    def of(self, warp: WarpTrace) -> tuple[int, int]:
        return self._ids[(warp.pe, warp.warp_slot)]


def chrome_trace(
    trace_buffer: Any, slot_map: SlotMap = None, *, group_by: str = "block", check_table: bool = True
) -> tuple[dict[str, Any], ExportReport]:
    """The Chrome trace JSON object of ``trace_buffer`` (one buffer, a Trace, or a list of them,
    one per PE) and a report; see :func:`export_to_perfetto`."""
    if group_by not in GROUPINGS:
        raise InvalidArgumentError(f"group_by={group_by!r} is not one of {', '.join(GROUPINGS)}")
    traces = load_traces(trace_buffer)
    names = slot_names(traces, slot_map, check_table=check_table)
    pairing = pair(traces)
    origin = origin_ns(traces)
    tracks = _Tracks(traces, group_by)

    def common(warp: WarpTrace, slot: int) -> dict[str, Any]:
        name = slot_name(names, slot)
        pid, tid = tracks.of(warp)
        return {"name": name, "cat": name.split("/", 1)[0], "pid": pid, "tid": tid}

    body: list[dict[str, Any]] = []
    for piece in pairing.slices:
        event = common(piece.warp, piece.slot)
        event.update(ph="X", ts=_us(piece.start_ns - origin), dur=_us(piece.duration_ns))
        event["args"] = {"slot": piece.slot, "depth": piece.depth, "arg": piece.begin_arg, "end_arg": piece.end_arg}
        body.append(event)
    for instant in pairing.instants:
        event = common(instant.warp, instant.slot)
        event.update(ph="i", s="t", ts=_us(instant.timestamp_ns - origin))
        event["args"] = {"slot": instant.slot, "arg": instant.arg}
        body.append(event)
    # Enclosing slices first at equal start, so viewers nest them the way the device did.
    body.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], -e.get("dur", 0.0)))
    document = {
        "traceEvents": tracks.metadata + body,
        "displayTimeUnit": "ns",
        "otherData": {"producer": "mori.viz", "origin_globaltimer_ns": origin, "pes": [t.pe for t in traces]},
    }
    report = ExportReport(
        path=None,
        slices=len(pairing.slices),
        instants=len(pairing.instants),
        tracks=tracks.count,
        orphan_ends=pairing.orphan_ends,
        unclosed_begins=pairing.unclosed_begins,
        overwritten_events=sum(w.overwritten for t in traces for w in t.warps),
        dropped_warps=sum(t.dropped_warps for t in traces),
    )
    return document, report


def export_to_perfetto(
    trace_buffer: Any,
    filename: str | os.PathLike[str] = "trace.json",
    slot_map: SlotMap = None,
    *,
    group_by: str = "block",
    check_table: bool = True,
) -> ExportReport:
    """Writes ``trace_buffer`` as Chrome trace JSON to ``filename`` for ui.perfetto.dev.

    ``trace_buffer``: a torch tensor (any device), numpy array or bytes holding one buffer, or a
    list of them, one per PE. ``slot_map``: a :class:`~mori.viz.SlotTable` (checked against the
    table the kernel recorded unless ``check_table=False``), a dict id -> name or name -> id, an
    Enum class, or None for ``slot <id>`` names. Returns what was written and what was dropped
    (orphan ENDs, unclosed BEGINs, overwritten events), which is also logged as a warning.
    """
    document, report = chrome_trace(trace_buffer, slot_map, group_by=group_by, check_table=check_table)
    path = Path(filename)
    with path.open("w") as out:
        json.dump(document, out, separators=(",", ":"))
    lost = report.orphan_ends + report.unclosed_begins + report.overwritten_events + report.dropped_warps
    if lost:
        _log.warning(
            "%s: %d orphan ENDs, %d unclosed BEGINs, %d overwritten events, %d warps without a slot were left out",
            path,
            report.orphan_ends,
            report.unclosed_begins,
            report.overwritten_events,
            report.dropped_warps,
        )
    _log.info(
        "wrote %s: %d slices and %d instants on %d warp tracks", path, report.slices, report.instants, report.tracks
    )
    return dataclasses.replace(report, path=path)
