# SPDX-License-Identifier: MIT
"""``python -m mori.cco env [--json]``: mori-cco's settings, printed by ``python -m mori env``."""

from __future__ import annotations

from mori._env_command import package_main


def main(argv: list[str] | None = None) -> int:
    return package_main("mori-cco", argv)


if __name__ == "__main__":
    raise SystemExit(main())
