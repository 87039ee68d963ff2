"""Print the packages a change touches, plus their dependents, in build order.

Usage: ``python ci/changed_packages.py <base-ref> [--sessions]``. Compares ``<base-ref>`` with the
working tree (committed and uncommitted changes). A change to shared infrastructure (noxfile, ci/,
lint config) selects every package; docs-only changes select none.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterable

from pkggraph import ROOT, Graph, dependents, load_pkgs

# Paths whose change can affect how every package is built or tested.
_SHARED = ("noxfile.py", "ci/", ".ci/", "ruff.toml", "mypy.ini")


def affected(paths: Iterable[str], pkgs: Graph) -> list[str]:
    """Map repository-relative paths to packages, then add dependents."""
    changed: set[str] = set()
    for path in paths:
        if path.startswith(_SHARED):
            return list(dependents(pkgs, set(pkgs)))
        parts = path.split("/")
        if len(parts) > 2 and parts[0] == "packages" and parts[1].startswith("mori"):
            pkg = "root" if parts[1] == "mori" else parts[1].removeprefix("mori-")
            if pkg in pkgs:
                changed.add(pkg)
    return dependents(pkgs, changed)


def changed_paths(base: str) -> list[str]:
    out = subprocess.run(
        ["git", "diff", "--name-only", base], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return [line for line in out.splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("base", help="git ref to compare the working tree with, e.g. origin/main")
    parser.add_argument("--sessions", action="store_true", help="print test-<pkg> nox session names")
    args = parser.parse_args(argv)
    for pkg in affected(changed_paths(args.base), load_pkgs()):
        print(f"test-{pkg}" if args.sessions else pkg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
