# SPDX-License-Identifier: MIT
"""read_trace on buffers built byte for byte like the device's (synthetic.py)."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from synthetic import BEGIN, END, INSTANT, Warp, build

import mori.viz
from mori.viz.errors import InvalidArgumentError, TraceFormatError


def test_warps_events_and_header_fields():
    warps = {
        0: Warp(block=0, warp=0, smid=5, table_id=0xABC).begin(100, 1).end(250, 1, arg=9),
        3: Warp(block=1, warp=1, smid=7).instant(400, 2, arg=77),
    }
    trace = mori.viz.read_trace(build(4, 8, warps, pe=2, dropped=1))
    assert (trace.pe, trace.num_warps, trace.events_per_warp, trace.dropped_warps) == (2, 4, 8, 1)
    assert [w.warp_slot for w in trace.warps] == [0, 3]
    first, second = trace.warps
    assert (first.block, first.warp, first.smid, first.table_id, first.recorded, first.overwritten) == (
        0,
        0,
        5,
        0xABC,
        2,
        0,
    )
    assert first.events["timestamp_ns"].tolist() == [100, 250]
    assert first.events["kind"].tolist() == [BEGIN, END]
    assert first.events["arg"].tolist() == [0, 9]
    assert (second.block, second.warp, second.events["kind"].tolist(), second.events["arg"].tolist()) == (
        1,
        1,
        [INSTANT],
        [77],
    )
    assert trace.event_count == 3


def test_wrapped_ring_keeps_the_newest_events_in_order():
    warp = Warp(block=0, warp=0)
    for i in range(11):
        warp.instant(1000 + i, slot=i)
    trace = mori.viz.read_trace(build(1, 4, {0: warp}))
    (only,) = trace.warps
    assert only.recorded == 11 and only.overwritten == 7
    assert only.events["slot"].tolist() == [7, 8, 9, 10]
    assert only.events["timestamp_ns"].tolist() == [1007, 1008, 1009, 1010]


@pytest.mark.parametrize("form", ["bytes", "bytearray", "memoryview", "uint8", "int64"])
def test_buffer_forms(form):
    raw = build(2, 4, {1: Warp(block=0, warp=1).begin(5, 0).end(6, 0)})
    buffer = {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "uint8": np.frombuffer(raw, dtype=np.uint8),
        "int64": np.frombuffer(raw, dtype=np.int64),  # MORI hands int64 tensors around
    }[form]
    assert mori.viz.read_trace(buffer).warps[0].events["timestamp_ns"].tolist() == [5, 6]


def test_torch_tensor_if_torch_is_installed():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    raw = build(2, 4, {0: Warp(block=0, warp=0).instant(42, 3)})
    tensor = torch.frombuffer(bytearray(raw), dtype=torch.int64)
    assert mori.viz.read_trace(tensor).warps[0].events["timestamp_ns"].tolist() == [42]


def test_bad_magic_short_buffer_and_bad_version():
    raw = bytearray(build(2, 4, {}))
    with pytest.raises(TraceFormatError, match="magic"):
        mori.viz.read_trace(b"\0" * 64 + bytes(raw[64:]))
    with pytest.raises(TraceFormatError, match=f"holds {len(raw) - 16} bytes.*needs {len(raw)}"):
        mori.viz.read_trace(bytes(raw[:-16]))
    with pytest.raises(TraceFormatError, match="less than the 64-byte header"):
        mori.viz.read_trace(bytes(raw[:10]))
    struct.pack_into("<I", raw, 8, 2)
    with pytest.raises(TraceFormatError, match="layout version 2"):
        mori.viz.read_trace(bytes(raw))
    raw = bytearray(build(2, 4, {}))
    struct.pack_into("<I", raw, 20, 6)  # events_per_warp not a power of two
    with pytest.raises(TraceFormatError, match="events_per_warp=6"):
        mori.viz.read_trace(bytes(raw))


def test_count_beyond_written_events_is_a_format_error():
    raw = bytearray(build(1, 4, {0: Warp(block=0, warp=0).instant(1, 0)}))
    struct.pack_into("<I", raw, 64 + 8, 2)  # claims 2 events; the second record is all zeros
    with pytest.raises(TraceFormatError, match="warp slot 0: event 1 has kind 0"):
        mori.viz.read_trace(bytes(raw))


def test_unsupported_buffer_type():
    with pytest.raises(InvalidArgumentError, match="type list"):
        mori.viz.read_trace([1, 2, 3])
