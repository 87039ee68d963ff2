# SPDX-License-Identifier: MIT
"""Trace buffers built byte for byte the way the device writes them, for the host-side tests.

Written from the layout documented in include/mori_viz/layout.h with ``struct``, independently of
mori.viz.layout, so the reader is checked against a second implementation of the format.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

BEGIN, END, INSTANT = 1, 2, 3


@dataclass
class Warp:
    block: int
    warp: int
    smid: int = 0
    table_id: int = 0
    # (timestamp_ns, slot, kind, arg) in the order the warp recorded them
    events: list[tuple[int, int, int, int]] = field(default_factory=list)

    def begin(self, t: int, slot: int, arg: int = 0) -> Warp:
        self.events.append((t, slot, BEGIN, arg))
        return self

    def end(self, t: int, slot: int, arg: int = 0) -> Warp:
        self.events.append((t, slot, END, arg))
        return self

    def instant(self, t: int, slot: int, arg: int = 0) -> Warp:
        self.events.append((t, slot, INSTANT, arg))
        return self


def build(num_warps: int, events_per_warp: int, warps: dict[int, Warp], *, pe: int = 0, dropped: int = 0) -> bytes:
    """A buffer whose warp slot ``k`` recorded ``warps[k].events`` through a ring of
    ``events_per_warp`` records, exactly as mori_viz_record does (later events overwrite earlier)."""
    header = struct.pack("<QIIIIiIII24x", 0x315A495649524F4D, 1, 64, num_warps, events_per_warp, pe, 0, dropped, 0)
    assert len(header) == 64
    warp_headers = bytearray(16 * num_warps)
    rings = bytearray(16 * num_warps * events_per_warp)
    for slot, warp in warps.items():
        struct.pack_into(
            "<IHHII", warp_headers, 16 * slot, warp.block, warp.warp, warp.smid, len(warp.events), warp.table_id
        )
        for index, (t, trace_slot, kind, arg) in enumerate(warp.events):
            offset = 16 * (slot * events_per_warp + index % events_per_warp)
            struct.pack_into("<QHBBI", rings, offset, t, trace_slot, kind, 0, arg)
    return header + bytes(warp_headers) + bytes(rings)
