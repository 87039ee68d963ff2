# SPDX-License-Identifier: MIT
"""``python -m mori.io env``: the effective value of every registered environment variable."""

from __future__ import annotations

import argparse
import sys

from mori.io import settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mori.io", description=__doc__)
    parser.add_argument("command", choices=["env"], help="env: list MORI_IO_* variables and their values")
    parser.parse_args(argv)
    for name, kind, default, doc, value in settings.entries():
        sys.stdout.write(f"{name}={value}  ({kind}, default {default!r})\n    {doc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
