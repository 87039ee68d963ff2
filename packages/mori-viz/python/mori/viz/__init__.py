# SPDX-License-Identifier: MIT
"""mori.viz: warp-level kernel trace points and Perfetto export (MORI's ``mori.kernel_profiler``).

Device side: ``mori_viz/trace.cuh`` under :func:`get_include`, compiled in when a kernel is built
with :func:`jit_defines` (MORI_ENABLE_PROFILER=1), compiled out otherwise. Host side::

    table = mori.viz.SlotTable.from_json("my_slots.json")
    buf = mori.viz.allocate(num_warps=grid * warps_per_block)        # torch uint8 tensor on cuda
    kernel.launch(grid, block, [buf, ...])
    mori.viz.export_to_perfetto(buf, "trace.json", table)            # open in ui.perfetto.dev
    print(mori.viz.format_summary(mori.viz.summarize(buf, table)))
    mori.viz.plot_timeline(buf, "trace.png", table)                  # needs matplotlib

See docs/user-guide/viz.md.
"""

from __future__ import annotations

import logging

from mori._version import distribution_version
from mori.viz._sdk import ENABLE_DEFINE, get_include, jit_defines, profiler_enabled
from mori.viz.errors import (
    ConfigError,
    InvalidArgumentError,
    PlotUnavailableError,
    SlotTableError,
    TraceFormatError,
    VizError,
)
from mori.viz.intervals import Instant, Pairing, Slice, pair
from mori.viz.layout import allocate, buffer_nbytes, new_buffer, reset
from mori.viz.perfetto import ExportReport, chrome_trace, export_to_perfetto
from mori.viz.plot import plot_timeline
from mori.viz.reader import Trace, WarpTrace, read_trace
from mori.viz.slots import Slot, SlotTable
from mori.viz.summary import SlotSummary, format_summary, summarize

__version__ = distribution_version("mori-viz")

logging.getLogger("mori.viz").addHandler(logging.NullHandler())

__all__ = [
    "ENABLE_DEFINE",
    "ConfigError",
    "ExportReport",
    "Instant",
    "InvalidArgumentError",
    "Pairing",
    "PlotUnavailableError",
    "Slice",
    "Slot",
    "SlotSummary",
    "SlotTable",
    "SlotTableError",
    "Trace",
    "TraceFormatError",
    "VizError",
    "WarpTrace",
    "__version__",
    "allocate",
    "buffer_nbytes",
    "chrome_trace",
    "export_to_perfetto",
    "format_summary",
    "get_include",
    "jit_defines",
    "new_buffer",
    "pair",
    "plot_timeline",
    "profiler_enabled",
    "read_trace",
    "reset",
    "summarize",
]
