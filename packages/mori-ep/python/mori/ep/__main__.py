# SPDX-License-Identifier: MIT
"""``python -m mori.ep env``: the effective MORI_EP_* settings; ``python -m mori.ep bench``: mori-ep-bench."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["env"]:
        from mori import _env_command

        return _env_command.main(argv[1:], prog="python -m mori.ep env", package="mori-ep")
    if argv[:1] == ["bench"]:
        from mori.ep.bench import main as bench

        return bench(argv[1:])
    sys.stderr.write("usage: python -m mori.ep {env [--json] | bench [mori-ep-bench arguments]}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
