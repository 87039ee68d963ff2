# SPDX-License-Identifier: MIT
"""``python -m mori env [--json] [--package NAME]``: every installed mori package's settings."""

from __future__ import annotations

import sys

from mori import _env_command


def main(argv: list[str]) -> int:
    if argv[:1] == ["env"]:
        return _env_command.main(argv[1:])
    sys.stderr.write("usage: python -m mori env [--json] [--package NAME]\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
