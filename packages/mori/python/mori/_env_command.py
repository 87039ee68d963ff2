# SPDX-License-Identifier: MIT
"""``python -m mori env [--json] [--package NAME]``: every installed package's settings.

Each package's ``python -m mori.<pkg> env`` prints through :func:`main` filtered to that package
(and the shared settings of the root, which reach it too), so there is one format. The exit status
is 1 when any listed value is invalid (or a registry failed to load), else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from mori.settings import Entry, registries


def _distribution(name: str) -> str:
    """``io`` and ``mori-io`` both name the mori-io distribution; ``mori`` is the root."""
    return name if name == "mori" or name.startswith("mori-") else f"mori-{name}"


def collect(packages: Sequence[str] = ()) -> tuple[list[Entry], dict[str, str]]:
    """The entries of the wanted packages' registries (all installed ones when none is named) and
    the registries that failed to load, with why."""
    failures: dict[str, str] = {}
    found = registries(failures)
    wanted = [_distribution(p) for p in packages] or list(found)
    entries = [entry for name in wanted if name in found for entry in found[name].entries()]
    for name in wanted:
        if name not in found and name not in failures:
            failures[name] = "not installed (no registry in the mori.settings entry points)"
    return entries, {name: why for name, why in failures.items() if name in wanted or not packages}


def format_text(entries: list[Entry], failures: dict[str, str]) -> str:
    lines = []
    package = None
    for entry in entries:
        if entry.package != package:
            package = entry.package
            lines.append(f"# {package}")
        flags = "" if entry.source == "default" else f"  [{entry.source}]"
        if entry.error is not None:
            flags += f"  INVALID: {entry.error}"
        lines.append(f"{entry.name}={entry.value}  ({entry.type}, default {entry.default!r}){flags}")
        lines.append(f"    {entry.doc}")
    for name, why in failures.items():
        lines.append(f"# {name}: registry not loaded: {why}")
    return "\n".join(lines) + "\n"


def format_json(entries: list[Entry], failures: dict[str, str]) -> str:
    document = {
        "settings": [dataclasses.asdict(entry) for entry in entries],
        "invalid": [entry.name for entry in entries if entry.error is not None],
        "failed_registries": failures,
    }
    return json.dumps(document, indent=2) + "\n"


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m mori env", package: str | None = None) -> int:
    """The ``env`` command; ``package`` fixes the listing to one package (plus the root's shared settings)."""
    parser = argparse.ArgumentParser(prog=prog, description="List mori settings: value, source, type, default, doc.")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    if package is None:
        parser.add_argument(
            "--package",
            action="append",
            default=[],
            metavar="NAME",
            help="only this package (mori-io or io); repeatable",
        )
    args = parser.parse_args(argv)
    packages = [package, "mori"] if package is not None else args.package
    entries, failures = collect(packages)
    sys.stdout.write((format_json if args.json else format_text)(entries, failures))
    return 1 if failures or any(entry.error is not None for entry in entries) else 0


def package_main(package: str, argv: Sequence[str] | None = None) -> int:
    """``python -m mori.<name> env [--json]`` of a package whose only command is ``env``: :func:`main`
    fixed to ``package`` (its distribution name, e.g. ``mori-io``)."""
    short = package.removeprefix("mori-")
    parser = argparse.ArgumentParser(prog=f"python -m mori.{short}")
    sub = parser.add_subparsers(dest="command", required=True)
    env = sub.add_parser("env", help=f"print every environment variable {package} reads, with its effective value")
    env.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    return main(["--json"] if args.json else [], prog=f"python -m mori.{short} env", package=package)
