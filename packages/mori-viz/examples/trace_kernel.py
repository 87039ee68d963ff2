# SPDX-License-Identifier: MIT
"""Profile a small JIT kernel with mori.viz: build it with trace points, run it, and write a
Perfetto trace, a PNG timeline and a per-slot summary. Needs a GPU, torch and mori-shmem (whose JIT
compiles the kernel); matplotlib for the PNG.

    MORI_ENABLE_PROFILER=1 python packages/mori-viz/examples/trace_kernel.py --out-dir /tmp/viz-demo

then open /tmp/viz-demo/trace.json in https://ui.perfetto.dev.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import tempfile
from pathlib import Path

import torch

import mori.viz
from mori.shmem import jit
from mori.viz import codegen

HERE = Path(__file__).resolve().parent
_log = logging.getLogger("trace_kernel")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("viz-demo"))
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=7168)
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--threads", type=int, default=256, help="a multiple of 32")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not mori.viz.profiler_enabled():
        _log.error("set MORI_ENABLE_PROFILER=1: without it the kernel is built with no trace points")
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)

    # The slot table is the one source of the names: the header the kernel includes and the names
    # the exporter prints both come from it (a kernel package commits the generated header).
    table = mori.viz.SlotTable.from_json(HERE / "demo_slots.json")
    generated = Path(tempfile.mkdtemp(prefix="mori-viz-demo-"))
    codegen.write(generated / "demo_slots.h", codegen.render_header(table, source="demo_slots.json"))
    kernel = jit.load_module(
        HERE / "rms_norm.cu",
        defines=mori.viz.jit_defines(),
        include_dirs=[generated, mori.viz.get_include()],
    ).function("rms_norm")

    warps = args.blocks * args.threads // 32
    trace = mori.viz.allocate(warps, 1024, pe=0)
    x = torch.randn(args.rows, args.cols, device="cuda")
    y = torch.empty_like(x)
    launch_args = [trace, x, y, ctypes.c_int32(args.rows), ctypes.c_int32(args.cols)]
    for _ in range(3):  # warm-up launches: their events are thrown away below
        kernel.launch(args.blocks, args.threads, launch_args, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    mori.viz.reset(trace)
    kernel.launch(args.blocks, args.threads, launch_args, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()

    reference = x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-6)
    torch.testing.assert_close(y, reference, rtol=1e-4, atol=1e-4)

    report = mori.viz.export_to_perfetto(trace, args.out_dir / "trace.json", table)
    _log.info("%s: %d slices, %d instants on %d warps", report.path, report.slices, report.instants, report.tracks)
    _log.info("per-slot device time:\n%s", mori.viz.format_summary(mori.viz.summarize(trace, table)))
    try:
        png = mori.viz.plot_timeline(trace, args.out_dir / "trace.png", table, max_tracks=64)
        _log.info("timeline: %s", png)
    except mori.viz.PlotUnavailableError as exc:
        _log.warning("no PNG: %s", exc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
