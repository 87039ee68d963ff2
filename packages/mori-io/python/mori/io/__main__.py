# SPDX-License-Identifier: MIT
"""``python -m mori.io env [--json]``: mori.io's settings, printed by ``python -m mori env``."""

from __future__ import annotations

from mori._env_command import package_main


def main(argv: list[str] | None = None) -> int:
    return package_main("mori-io", argv)


if __name__ == "__main__":
    raise SystemExit(main())
