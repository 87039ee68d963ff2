# SPDX-License-Identifier: MIT
"""The PNG timeline: written, non-empty, of the requested pixel size; a clear error without matplotlib."""

from __future__ import annotations

import struct
import sys

import pytest
import scenarios

import mori.viz
from mori.viz.errors import InvalidArgumentError, PlotUnavailableError


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_png_has_the_requested_size(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    path = mori.viz.plot_timeline(
        scenarios.buffers(),
        tmp_path / "t.png",
        {0: "outer", 1: "inner", 3: "done"},
        width_px=1200,
        height_px=800,
        dpi=100,
    )
    data = path.read_bytes()
    assert len(data) > 10_000  # bars, labels and a heatmap, not a blank canvas
    assert _png_size(data) == (1200, 800)


def test_few_tracks_and_empty_trace(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from synthetic import build

    assert _png_size(
        mori.viz.plot_timeline(
            scenarios.buffers(), tmp_path / "a.png", max_tracks=1, width_px=640, height_px=480
        ).read_bytes()
    ) == (640, 480)
    assert _png_size(
        mori.viz.plot_timeline(build(2, 4, {}), tmp_path / "b.png", width_px=640, height_px=480).read_bytes()
    ) == (640, 480)


def test_bad_sizes_are_refused(tmp_path):
    with pytest.raises(InvalidArgumentError, match="width_px=10"):
        mori.viz.plot_timeline(scenarios.buffers(), tmp_path / "t.png", width_px=10)
    with pytest.raises(InvalidArgumentError, match="max_tracks=0"):
        mori.viz.plot_timeline(scenarios.buffers(), tmp_path / "t.png", max_tracks=0)


def test_without_matplotlib_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    with pytest.raises(PlotUnavailableError, match=r"mori-viz\[plot\]"):
        mori.viz.plot_timeline(scenarios.buffers(), tmp_path / "t.png")
