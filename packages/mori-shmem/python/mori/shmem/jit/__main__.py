# SPDX-License-Identifier: MIT
"""``python -m mori.shmem.jit``: the same commands as the ``mori-jit`` console script."""

from __future__ import annotations

from mori.shmem.jit.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
