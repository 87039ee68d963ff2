# SPDX-License-Identifier: MIT
"""mori.viz.layout against the C header: a host C compiler prints sizeof/offsetof of every field."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from host_probe import run_c_probe

import mori.viz
from mori.viz import layout
from mori.viz.errors import InvalidArgumentError

STRUCTS = {
    "mori_viz_header_t": layout.HEADER_DTYPE,
    "mori_viz_warp_header_t": layout.WARP_HEADER_DTYPE,
    "mori_viz_event_t": layout.EVENT_DTYPE,
}
CONSTANTS = {
    "MORI_VIZ_LAYOUT_VERSION": layout.LAYOUT_VERSION,
    "MORI_VIZ_MAGIC": layout.MAGIC,
    "MORI_VIZ_HEADER_BYTES": layout.HEADER_BYTES,
    "MORI_VIZ_WARP_HEADER_BYTES": layout.WARP_HEADER_BYTES,
    "MORI_VIZ_EVENT_BYTES": layout.EVENT_BYTES,
    "MORI_VIZ_EVENT_BEGIN": layout.EVENT_BEGIN,
    "MORI_VIZ_EVENT_END": layout.EVENT_END,
    "MORI_VIZ_EVENT_INSTANT": layout.EVENT_INSTANT,
}


def _c_layout(tmp_path: Path) -> dict[str, int]:
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "mori_viz/layout.h"', "int main(void) {"]
    for struct, dtype in STRUCTS.items():
        lines.append(f'  printf("{struct} %zu\\n", sizeof({struct}));')
        for field in dtype.names:
            lines.append(f'  printf("{struct}.{field} %zu\\n", offsetof({struct}, {field}));')
    for name in CONSTANTS:
        lines.append(f'  printf("{name} %llu\\n", (unsigned long long)({name}));')
    lines += ["  return 0;", "}"]
    out = run_c_probe(tmp_path, lines, mori.viz.get_include())
    return {key: int(value) for key, value in (line.split() for line in out.splitlines())}


def test_numpy_dtypes_match_the_c_structs(tmp_path):
    c = _c_layout(tmp_path)
    for struct, dtype in STRUCTS.items():
        assert c[struct] == dtype.itemsize, struct
        for field in dtype.names:
            assert c[f"{struct}.{field}"] == dtype.fields[field][1], f"{struct}.{field}"
    for name, value in CONSTANTS.items():
        assert c[name] == value, name
    assert c["mori_viz_header_t.dropped_warps"] == layout.DROPPED_WARPS_OFFSET


def test_new_buffer_header_and_size():
    data = mori.viz.new_buffer(6, 8, pe=3)
    assert data.dtype == np.uint8
    assert data.size == 64 + 16 * 6 + 16 * 6 * 8 == mori.viz.buffer_nbytes(6, 8)
    assert bytes(data[:8]) == b"MORIVIZ1"
    header = data[:64].view(layout.HEADER_DTYPE)[0]
    assert (int(header["num_warps"]), int(header["events_per_warp"]), int(header["pe"])) == (6, 8, 3)
    assert not data[64:].any()


def test_default_events_per_warp_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("MORI_VIZ_EVENTS_PER_WARP", "32")
    assert mori.viz.buffer_nbytes(2) == 64 + 32 + 2 * 32 * 16


@pytest.mark.parametrize(
    ("num_warps", "events", "match"),
    [
        (0, 8, "num_warps=0"),
        (2**21, 8, "num_warps"),
        (4, 12, "events_per_warp=12"),
        (4, 0, "events_per_warp=0"),
        (4, 2**25, "power of two"),
    ],
)
def test_bad_geometry_is_refused(num_warps, events, match):
    with pytest.raises(InvalidArgumentError, match=match):
        mori.viz.new_buffer(num_warps, events)


def test_reset_clears_events_and_dropped_count_but_keeps_the_header():
    data = mori.viz.new_buffer(2, 4, pe=1)
    header = bytes(data[:64])
    data[64:] = 7
    data[layout.DROPPED_WARPS_OFFSET] = 5
    mori.viz.reset(data)
    assert not data[64:].any()
    assert data[layout.DROPPED_WARPS_OFFSET] == 0
    assert bytes(data[:32]) == header[:32]


def test_reset_refuses_foreign_buffers():
    with pytest.raises(InvalidArgumentError, match="bad magic"):
        mori.viz.reset(np.zeros(256, dtype=np.uint8))
    with pytest.raises(InvalidArgumentError, match="1-D uint8"):
        mori.viz.reset(np.zeros(32, dtype=np.int64))
