# SPDX-License-Identifier: MIT
"""``python -m mori.cco env``: the effective value of every mori-cco setting."""

from __future__ import annotations

import argparse
import sys

from mori.cco import _C


def _print_env() -> None:
    entries = _C.settings()
    width = max(len(e["name"]) for e in entries)
    for e in entries:
        marker = "" if e["effective"] == e["default"] else "  (set)"
        sys.stdout.write(
            f"{e['name']:<{width}}  {e['type']:<8} {e['effective']!r}{marker}\n"
            f"{'':<{width}}  default {e['default']!r}: {e['doc']}\n"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mori.cco")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="print every environment variable mori-cco reads, with its effective value")
    args = parser.parse_args(argv)
    if args.command == "env":
        _print_env()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
