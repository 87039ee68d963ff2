# SPDX-License-Identifier: MIT
"""``python -m mori.cco env [--json]``: mori-cco's settings, printed by ``python -m mori env``."""

from __future__ import annotations

import argparse

from mori import _env_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mori.cco")
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env", help="print every environment variable mori-cco reads, with its effective value")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    return _env_command.main(["--json"] if args.json else [], prog="python -m mori.cco env", package="mori-cco")


if __name__ == "__main__":
    raise SystemExit(main())
