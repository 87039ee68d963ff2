# SPDX-License-Identifier: MIT
"""``python -m mori.ep env``: the effective MORI_EP_* settings; ``python -m mori.ep bench``: mori-ep-bench."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["env"]:
        from mori.ep.settings import effective

        for name, value, doc in effective():
            sys.stdout.write(f"{name}={value}\n    {doc}\n")
        return 0
    if argv[:1] == ["bench"]:
        from mori.ep.bench import main as bench

        return bench(argv[1:])
    sys.stderr.write("usage: python -m mori.ep {env | bench [mori-ep-bench arguments]}\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
