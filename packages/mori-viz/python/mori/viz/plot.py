# SPDX-License-Identifier: MIT
"""A PNG for people who would rather look than read: a per-warp timeline above a heatmap of the
time each slot took per (PE, block). Needs matplotlib (``pip install mori-viz[plot]``)."""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mori.viz.errors import InvalidArgumentError, PlotUnavailableError
from mori.viz.intervals import origin_ns, pair
from mori.viz.slots import SlotMap, slot_name
from mori.viz.sources import load_traces, slot_names

_log = logging.getLogger("mori.viz")


def _figure(width_px: int, height_px: int, dpi: int) -> Any:
    try:
        # Figure + the Agg canvas directly, not pyplot: no global state, no display needed.
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # type: ignore[import-not-found, unused-ignore]
        from matplotlib.figure import Figure  # type: ignore[import-not-found, unused-ignore]
    except ImportError as exc:
        raise PlotUnavailableError(f"plot_timeline needs matplotlib ({exc}): pip install 'mori-viz[plot]'") from None
    figure = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    FigureCanvasAgg(figure)
    return figure


def plot_timeline(
    trace_buffer: Any,
    filename: str | os.PathLike[str] = "trace.png",
    slot_map: SlotMap = None,
    *,
    width_px: int = 1600,
    height_px: int = 1000,
    dpi: int = 100,
    max_tracks: int = 128,
    check_table: bool = True,
) -> Path:
    """Draws ``trace_buffer`` (as for :func:`mori.viz.export_to_perfetto`) into a PNG of exactly
    ``width_px`` x ``height_px`` pixels.

    Top: one row per warp (the first ``max_tracks``, ordered by PE, block, warp), slices as bars
    coloured by slot, nested slices thinner, instants as ticks. Bottom: total slice time of each
    slot per (PE, block), in microseconds.
    """
    for name, value, low in (("width_px", width_px, 200), ("height_px", height_px, 200), ("dpi", dpi, 10)):
        if type(value) is not int or value < low:
            raise InvalidArgumentError(f"{name}={value!r} must be an int >= {low}")
    if type(max_tracks) is not int or max_tracks < 1:
        raise InvalidArgumentError(f"max_tracks={max_tracks!r} must be an int >= 1")
    traces = load_traces(trace_buffer)
    names = slot_names(traces, slot_map, check_table=check_table)
    pairing = pair(traces)
    origin = origin_ns(traces)
    warps = sorted((w for t in traces for w in t.warps), key=lambda w: (w.pe, w.block, w.warp, w.warp_slot))
    if len(warps) > max_tracks:
        _log.warning("plot_timeline: showing %d of %d warp tracks (max_tracks)", max_tracks, len(warps))
    row_of = {(w.pe, w.warp_slot): row for row, w in enumerate(warps[:max_tracks])}
    slots = sorted({p.slot for p in pairing.slices} | {i.slot for i in pairing.instants})
    groups = sorted({(w.pe, w.block) for w in warps})

    figure = _figure(width_px, height_px, dpi)
    timeline, heat = figure.subplots(2, 1, gridspec_kw={"height_ratios": [3, 2]})
    colours = {slot: figure_colour(index) for index, slot in enumerate(slots)}
    # One broken_barh per (depth, row, slot) and one scatter per slot: a call per slice would take
    # minutes on a real kernel's hundreds of thousands of slices. Outer depths first, so nested
    # slices are drawn on top of their parents.
    bars: dict[tuple[int, int, int], list[tuple[float, float]]] = defaultdict(list)
    for piece in pairing.slices:
        row = row_of.get((piece.warp.pe, piece.warp.warp_slot))
        if row is not None:
            bars[(piece.depth, row, piece.slot)].append(((piece.start_ns - origin) / 1e3, piece.duration_ns / 1e3))
    for (depth, row, slot), spans in sorted(bars.items()):
        height = 0.8 / (1 + depth)
        timeline.broken_barh(spans, (row - height / 2, height), facecolors=colours[slot])
    ticks: dict[int, tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
    for instant in pairing.instants:
        row = row_of.get((instant.warp.pe, instant.warp.warp_slot))
        if row is not None:
            ticks[instant.slot][0].append((instant.timestamp_ns - origin) / 1e3)
            ticks[instant.slot][1].append(row)
    for slot, (xs, ys) in ticks.items():
        timeline.scatter(xs, ys, marker="|", s=100, color=colours[slot])
    timeline.set_yticks(range(len(row_of)))
    timeline.set_yticklabels([f"PE{w.pe} b{w.block} w{w.warp}" for w in warps[:max_tracks]], fontsize=6)
    timeline.set_ylim(max(len(row_of), 1) - 0.5, -0.5)
    timeline.set_xlabel("time since first event (us)")
    timeline.set_title("mori.viz warp timeline")
    if slots:
        from matplotlib.patches import Patch  # type: ignore[import-not-found, unused-ignore]

        handles = [Patch(color=colours[s], label=slot_name(names, s)) for s in slots]
        timeline.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)

    timed = sorted({p.slot for p in pairing.slices})  # instants have no duration to add up
    busy = np.zeros((max(len(timed), 1), max(len(groups), 1)))
    column = {group: index for index, group in enumerate(groups)}
    line = {slot: index for index, slot in enumerate(timed)}
    for piece in pairing.slices:
        busy[line[piece.slot], column[(piece.warp.pe, piece.warp.block)]] += piece.duration_ns / 1e3
    image = heat.imshow(busy, aspect="auto", cmap="viridis", interpolation="nearest")
    heat.set_yticks(range(len(timed)))
    heat.set_yticklabels([slot_name(names, s) for s in timed], fontsize=7)
    step = max(1, len(groups) // 32)
    heat.set_xticks(range(0, len(groups), step))
    heat.set_xticklabels([f"PE{pe}/b{block}" for pe, block in groups[::step]], fontsize=6, rotation=90)
    heat.set_title("total slice time per slot and block (us)")
    figure.colorbar(image, ax=heat)
    figure.tight_layout()
    path = Path(filename)
    figure.savefig(path, dpi=dpi, format="png")
    _log.info("wrote %s (%d x %d px, %d tracks)", path, width_px, height_px, len(row_of))
    return path


def figure_colour(index: int) -> tuple[float, float, float]:
    """A distinct colour per slot from matplotlib's tab20: its ten strong colours first, then
    their light partners (adjacent tab20 entries are too alike to tell nested slices apart)."""
    from matplotlib import colormaps  # type: ignore[import-not-found, unused-ignore]

    rgba = colormaps["tab20"]((2 * index) % 20 + (index // 10) % 2)
    return (float(rgba[0]), float(rgba[1]), float(rgba[2]))
