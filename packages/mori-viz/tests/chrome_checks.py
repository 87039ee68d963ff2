# SPDX-License-Identifier: MIT
"""A structural check of Chrome trace JSON, shared by the synthetic and the GPU tests."""

from __future__ import annotations

from collections import defaultdict


def check_chrome_trace(document: dict) -> None:
    """The structure chrome://tracing and Perfetto's JSON importer rely on."""
    assert set(document) >= {"traceEvents"}
    assert document["displayTimeUnit"] in ("ms", "ns")
    per_track = defaultdict(list)
    for event in document["traceEvents"]:
        assert event["ph"] in ("M", "X", "i"), event
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            continue
        assert isinstance(event["name"], str) and isinstance(event["ts"], float | int) and event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] >= 0
            per_track[(event["pid"], event["tid"])].append((event["ts"], event["ts"] + event["dur"]))
        else:
            assert event["s"] == "t"
    for track, spans in per_track.items():  # slices of one track nest or are disjoint, never overlap partly
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[float, float]] = []
        for start, end in spans:
            while stack and stack[-1][1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1][1], f"track {track}: ({start}, {end}) overlaps {stack[-1]}"
            stack.append((start, end))
