# SPDX-License-Identifier: MIT
"""``python -m mori.io env [--json]``: mori.io's settings, printed by ``python -m mori env``."""

from __future__ import annotations

import sys

from mori import _env_command


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["env"]:
        sys.stderr.write("usage: python -m mori.io env [--json]\n")
        return 2
    return _env_command.main(args[1:], prog="python -m mori.io env", package="mori-io")


if __name__ == "__main__":
    sys.exit(main())
