# SPDX-License-Identifier: MIT
"""Pairing a warp's begin/end events into nested slices.

Per warp, an END closes the innermost open BEGIN of the same slot. Slices opened inside it and
never closed are "unclosed" and dropped (their end is unknown); an END with no open BEGIN of its
slot is an "orphan" (its BEGIN was overwritten when the ring wrapped, or never recorded) and is
dropped too. Both are counted, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mori.viz import layout
from mori.viz.reader import Trace, WarpTrace


@dataclass(frozen=True)
class Slice:
    """A closed BEGIN..END of one slot on one warp; ``depth`` 0 is outermost."""

    warp: WarpTrace
    slot: int
    start_ns: int
    end_ns: int
    depth: int
    begin_arg: int
    end_arg: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Instant:
    warp: WarpTrace
    slot: int
    timestamp_ns: int
    arg: int


@dataclass
class Pairing:
    slices: list[Slice] = field(default_factory=list)
    instants: list[Instant] = field(default_factory=list)
    orphan_ends: int = 0
    unclosed_begins: int = 0


def pair_warp(warp: WarpTrace, into: Pairing) -> None:
    """Adds the slices and instants of ``warp`` to ``into``."""
    open_stack: list[tuple[int, int, int]] = []  # (slot, start, arg)
    stamps = warp.events["timestamp_ns"].tolist()
    slots = warp.events["slot"].tolist()
    kinds = warp.events["kind"].tolist()
    args = warp.events["arg"].tolist()
    for stamp, slot, kind, arg in zip(stamps, slots, kinds, args, strict=True):
        if kind == layout.EVENT_BEGIN:
            open_stack.append((slot, stamp, arg))
        elif kind == layout.EVENT_END:
            match = next((i for i in range(len(open_stack) - 1, -1, -1) if open_stack[i][0] == slot), None)
            if match is None:
                into.orphan_ends += 1
                continue
            into.unclosed_begins += len(open_stack) - 1 - match
            _, start, begin_arg = open_stack[match]
            del open_stack[match:]
            into.slices.append(Slice(warp, slot, start, stamp, match, begin_arg, arg))
        else:
            into.instants.append(Instant(warp, slot, stamp, arg))
    into.unclosed_begins += len(open_stack)


def pair(traces: Iterable[Trace] | Trace) -> Pairing:
    """Slices and instants of every warp of ``traces``."""
    result = Pairing()
    for trace in [traces] if isinstance(traces, Trace) else traces:
        for warp in trace.warps:
            pair_warp(warp, result)
    return result


def origin_ns(traces: Sequence[Trace]) -> int:
    """The earliest timestamp in ``traces`` (0 when there are no events): exported times start there."""
    starts = [int(w.events["timestamp_ns"][0]) for t in traces for w in t.warps if len(w.events)]
    return min(starts, default=0)
