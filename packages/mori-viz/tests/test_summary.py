# SPDX-License-Identifier: MIT
"""Per-slot elapsed-time summaries against the hand-written slices of scenarios.py."""

from __future__ import annotations

import numpy as np
import scenarios

import mori.viz
from mori.viz.slots import SlotTable


def test_summary_matches_the_expected_slices():
    table = SlotTable.from_dict(scenarios.TABLE)
    summaries = {s.name: s for s in mori.viz.summarize(scenarios.buffers(table.table_id), table)}
    assert sorted(summaries) == ["kernel/inner", "kernel/outer"]  # instants and lost slices have no duration
    for name, summary in summaries.items():
        rows = [(pe, block, warp, s, e) for pe, block, warp, n, s, e, _ in scenarios.SLICES if n == name]
        durations = np.array([e - s for *_, s, e in rows])
        assert summary.count == len(rows)
        assert summary.warps == len({r[:3] for r in rows})
        assert summary.total_ns == durations.sum()
        assert summary.mean_ns == durations.mean()
        assert (summary.min_ns, summary.max_ns) == (durations.min(), durations.max())
        assert summary.p50_ns == np.median(durations)
        assert summary.span_ns == max(r[4] for r in rows) - min(r[3] for r in rows)
    assert summaries["kernel/outer"].span_ns == 1500  # 500 (PE 1) to 2000 (PE 0)


def test_format_summary_lists_every_slot_in_microseconds():
    text = mori.viz.format_summary(mori.viz.summarize(scenarios.buffers(), {0: "outer", 1: "inner"}))
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["slot", "count", "warps"]
    inner = next(line for line in lines if line.startswith("inner")).split()
    assert inner[1:4] == ["2", "1", "0.250"]  # count, warps, mean us
