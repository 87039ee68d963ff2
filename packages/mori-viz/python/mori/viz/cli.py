# SPDX-License-Identifier: MIT
"""``mori-viz`` / ``python -m mori.viz``: env, codegen and export from a saved buffer.

    mori-viz env
    mori-viz codegen slots.json --header slots.h [--python slots.py] [--check]
    mori-viz export trace.bin [more.bin ...] --out trace.json [--slots slots.json] [--png trace.png] [--summary]

``trace.bin`` is a buffer's raw bytes (``buf.cpu().numpy().tofile("trace.bin")``).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import numpy as np

from mori.viz import codegen
from mori.viz.errors import VizError
from mori.viz.perfetto import export_to_perfetto
from mori.viz.slots import SlotTable
from mori.viz.summary import format_summary, summarize


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mori-viz", description="mori.viz kernel trace tools")
    commands = parser.add_subparsers(dest="command", required=True)
    env = commands.add_parser("env", help="print the effective MORI_ENABLE_PROFILER / MORI_VIZ_* settings")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    gen = commands.add_parser("codegen", help="generate a C header / Python names from a slot table (JSON)")
    gen.add_argument("table", type=Path)
    gen.add_argument("--header", type=Path, help="C header to write")
    gen.add_argument("--python", type=Path, help="Python module to write")
    gen.add_argument("--check", action="store_true", help="write nothing; fail if an output is stale")
    export = commands.add_parser("export", help="Chrome/Perfetto JSON (and a PNG) from saved buffers")
    export.add_argument("buffers", type=Path, nargs="+", help="raw buffer bytes, one file per PE")
    export.add_argument("--out", type=Path, default=Path("trace.json"))
    export.add_argument("--slots", type=Path, help="the slot table (JSON) the kernels were built with")
    export.add_argument("--png", type=Path, help="also draw a timeline PNG (needs matplotlib)")
    export.add_argument("--group-by", choices=("block", "pe"), default="block")
    export.add_argument("--summary", action="store_true", help="print per-slot elapsed times")
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command == "env":
        from mori import _env_command

        return _env_command.main(["--json"] if args.json else [], prog="python -m mori.viz env", package="mori-viz")
    if args.command == "codegen":
        table = SlotTable.from_json(args.table)
        if args.header is None and args.python is None:
            sys.stdout.write(codegen.render_header(table, source=args.table.name))
            return 0
        if args.header is not None:
            codegen.write(args.header, codegen.render_header(table, source=args.table.name), check=args.check)
        if args.python is not None:
            codegen.write(args.python, codegen.render_python(table, source=args.table.name), check=args.check)
        return 0
    buffers = [np.fromfile(path, dtype=np.uint8) for path in args.buffers]
    names = SlotTable.from_json(args.slots) if args.slots else None
    report = export_to_perfetto(buffers, args.out, names, group_by=args.group_by)
    sys.stdout.write(f"{report.path}: {report.slices} slices, {report.instants} instants, {report.tracks} tracks\n")
    if args.png is not None:
        from mori.viz.plot import plot_timeline

        plot_timeline(buffers, args.png, names)
    if args.summary:
        sys.stdout.write(format_summary(summarize(buffers, names)) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except VizError as exc:
        sys.stderr.write(f"mori-viz: {exc}\n")
        return 1
