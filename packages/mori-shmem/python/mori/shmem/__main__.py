# SPDX-License-Identifier: MIT
"""``python -m mori.shmem env``: the effective value of every mori-shmem setting."""

from __future__ import annotations

import argparse
import sys

from mori.shmem._native import _C


def _print_env() -> None:
    rows = [(name, kind, default, value, doc) for name, kind, default, doc, value in _C.env_entries()]
    width = max(len(row[0]) for row in rows)
    for name, kind, default, value, doc in rows:
        marker = "" if value == default else "  (set)"
        sys.stdout.write(f"{name:<{width}}  {kind:<8} {value!r}{marker}\n{'':<{width}}  default {default!r}: {doc}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mori.shmem")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print every environment variable mori-shmem reads, with its effective value")
    args = parser.parse_args(argv)
    if args.command == "env":
        _print_env()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
