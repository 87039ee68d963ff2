# SPDX-License-Identifier: MIT
"""``python -m mori.ir {path | build [--out FILE] [--force] [--variant V] | functions | declarations | env}``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m mori.ir", description="mori-ir's device bitcode")
    sub = parser.add_subparsers(dest="command", required=True)
    path = sub.add_parser("path", help="print the path of the bitcode find_bitcode() uses (building it if needed)")
    path.add_argument("--variant", choices=["full", "p2p"], default="full")
    build = sub.add_parser("build", help="build the bitcode with clang (into the cache, or --out)")
    build.add_argument("--out", type=Path)
    build.add_argument("--variant", choices=["full", "p2p"], default="full",
                       help="full: with the device proxy (remote PEs); p2p: load/store peers only")  # fmt: skip
    build.add_argument("--force", action="store_true", help="rebuild even when the cache has it")
    sub.add_parser("functions", help="list the exported device functions with their signatures")
    sub.add_parser("declarations", help="print LLVM IR declare lines for every exported function")
    env = sub.add_parser("env", help="print the effective MORI_IR_* settings (python -m mori env's format)")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)

    if args.command == "env":
        from mori import _env_command

        return _env_command.main(["--json"] if args.json else [], prog="python -m mori.ir env", package="mori-ir")

    from mori.ir import bitcode, functions

    if args.command == "path":
        sys.stdout.write(bitcode.find_bitcode(args.variant) + "\n")
    elif args.command == "build":
        sys.stdout.write(f"{bitcode.build_bitcode(args.out, force=args.force, variant=args.variant)}\n")
    elif args.command == "functions":
        for f in functions.DEVICE_FUNCTIONS.values():
            params = ", ".join(f"{t} {n}" for n, t in f.args)
            sys.stdout.write(f"{f.ret} {f.symbol}({params}){'  [pure]' if f.pure else ''}\n")
    else:
        sys.stdout.write(functions.llvm_declarations())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
