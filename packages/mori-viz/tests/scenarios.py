# SPDX-License-Identifier: MIT
"""A two-PE synthetic trace with nesting, an orphan END and an unclosed BEGIN, and what an exporter
must make of it, written out by hand (not computed by mori.viz) so the tests have a reference."""

from __future__ import annotations

from synthetic import Warp, build

OUTER, INNER, SCOPED, DONE = 0, 1, 2, 3
TABLE = {"prefix": "TEST", "slots": {"kernel": ["outer", "inner", "scoped", "done"]}}


def buffers(table_id: int = 0) -> list[bytes]:
    pe0 = {
        0: Warp(block=0, warp=0, smid=4, table_id=table_id)
        .begin(1000, OUTER)
        .begin(1100, INNER, arg=0)
        .end(1300, INNER, arg=0)
        .begin(1400, INNER, arg=1)
        .end(1700, INNER, arg=1)
        .end(2000, OUTER)
        .instant(2100, DONE, arg=42),
        1: Warp(block=0, warp=1, smid=4, table_id=table_id)
        .end(900, INNER)  # orphan: its BEGIN is gone
        .begin(1200, OUTER)
        .begin(1250, INNER)  # unclosed: closed over by the END of OUTER
        .end(1900, OUTER),
    }
    pe1 = {2: Warp(block=1, warp=0, smid=9, table_id=table_id).begin(500, OUTER).end(800, OUTER)}
    return [build(4, 16, pe0, pe=0), build(4, 16, pe1, pe=1)]


ORIGIN_NS = 500
# (pe, block, warp, name, start_ns, end_ns, depth) of every slice an exporter must keep
SLICES = [
    (0, 0, 0, "kernel/outer", 1000, 2000, 0),
    (0, 0, 0, "kernel/inner", 1100, 1300, 1),
    (0, 0, 0, "kernel/inner", 1400, 1700, 1),
    (0, 0, 1, "kernel/outer", 1200, 1900, 0),
    (1, 1, 0, "kernel/outer", 500, 800, 0),
]
INSTANTS = [(0, 0, 0, "kernel/done", 2100, 42)]
ORPHAN_ENDS = 1
UNCLOSED_BEGINS = 1
