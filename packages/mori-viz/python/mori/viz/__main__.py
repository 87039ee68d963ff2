# SPDX-License-Identifier: MIT
"""``python -m mori.viz``: see :mod:`mori.viz.cli`."""

from __future__ import annotations

import sys

from mori.viz.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
