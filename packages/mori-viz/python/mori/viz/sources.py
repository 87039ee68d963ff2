# SPDX-License-Identifier: MIT
"""What the exporters accept: one buffer or a list of them (one per PE), read into Traces, and
the slot names to show, checked against the table each kernel was built with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mori.viz.errors import InvalidArgumentError, SlotTableError
from mori.viz.reader import Trace, read_trace
from mori.viz.slots import SlotMap, resolve_slot_map


def load_traces(buffers: Any) -> list[Trace]:
    """``buffers``: a Trace or a buffer (see :func:`read_trace`), or a list/tuple of those (one
    per PE). Two buffers of the same PE are refused: their tracks would merge."""
    items = list(buffers) if isinstance(buffers, list | tuple) else [buffers]
    if not items:
        raise InvalidArgumentError("buffers is an empty list: pass at least one trace buffer")
    traces = [item if isinstance(item, Trace) else read_trace(item) for item in items]
    seen: dict[int, int] = {}
    for index, trace in enumerate(traces):
        if trace.pe in seen:
            raise InvalidArgumentError(
                f"buffers[{seen[trace.pe]}] and buffers[{index}] both belong to PE {trace.pe}: "
                "give each PE's buffer its own pe= when allocating"
            )
        seen[trace.pe] = index
    return traces


def slot_names(traces: Sequence[Trace], slot_map: SlotMap, *, check_table: bool = True) -> dict[int, str]:
    """id -> name from ``slot_map``; with ``check_table``, a SlotTable whose fingerprint differs
    from the one a warp recorded raises ``SlotTableError`` (the names would be wrong)."""
    names, table_id = resolve_slot_map(slot_map)
    if check_table and table_id is not None:
        for trace in traces:
            for warp in trace.warps:
                if warp.table_id not in (0, table_id):
                    raise SlotTableError(
                        f"PE {trace.pe} warp slot {warp.warp_slot} was built with slot table 0x{warp.table_id:08x}, "
                        f"but slot_map is table 0x{table_id:08x}: pass the table the kernel was compiled with "
                        "(or check_table=False)"
                    )
    return names
