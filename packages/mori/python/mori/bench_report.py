# SPDX-License-Identifier: MIT
"""What every ``mori-*-bench`` shares: aligned tables, a progress bar, size ladders and labels, the
flags that mean the same in every bench (``--world-size``, ``--json``) and the JSON file with its
provenance.

Pure Python without dependencies, so each bench formats and writes its results the same way::

    columns = [Column("size", 6), Column("GB/s", 8, ".2f")]
    lines = table(columns, [(human_size(n), gbps) for n, gbps in results])
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mori._provenance import provenance

_SIZE_UNITS = (("G", 30), ("M", 20), ("K", 10))


@dataclass(frozen=True)
class Column:
    """A table column: its title, its width and how a cell is formatted (``format`` spec after the
    alignment and width, e.g. ``".2f"`` or ``".0%"``; empty for a text cell)."""

    title: str
    width: int
    spec: str = ""
    align: str = ">"

    def head(self) -> str:
        return f"{self.title:{self.align}{self.width}}"

    def cell(self, value: object) -> str:
        return format(value, f"{self.align}{self.width}{self.spec}")


def header(columns: Sequence[Column]) -> str:
    """The titles of ``columns``, aligned as their cells are."""
    return " ".join(column.head() for column in columns)


def row(columns: Sequence[Column], values: Sequence[object]) -> str:
    """One table line; ``values`` may be fewer than ``columns`` (a row without the trailing cells)."""
    if len(values) > len(columns):
        raise ValueError(f"a row of {len(values)} values for a table of {len(columns)} columns")
    return " ".join(column.cell(value) for column, value in zip(columns, values, strict=False))


def table(columns: Sequence[Column], rows: Iterable[Sequence[object]], *, rule: bool = True) -> list[str]:
    """The header, a rule of dashes as long as the header (unless ``rule`` is False) and one line per row."""
    head = header(columns)
    return [head, *(["-" * len(head)] if rule else []), *(row(columns, values) for values in rows)]


def optional(value: float | None, spec: str) -> str:
    """``value`` formatted with ``spec``, or "-" where there is none."""
    return "-" if value is None else format(value, spec)


def human_size(size: int) -> str:
    """Bytes in the largest binary unit that divides them: 4096 -> "4K", 1 << 28 -> "256M", 1000 -> "1000"."""
    for unit, shift in _SIZE_UNITS:
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def size_ladder(low: int, high: int, factor: int = 4) -> list[int]:
    """low, low * factor, low * factor**2, ... up to high; high itself is always the last size."""
    if low < 1 or high < low or factor < 2:
        raise ValueError(f"a size ladder needs 1 <= low <= high and factor >= 2, got {low}, {high}, {factor}")
    sizes, size = [], low
    while size <= high:
        sizes.append(size)
        size *= factor
    if sizes[-1] != high:
        sizes.append(high)
    return sizes


def progress(label: str, done: int, total: int, width: int = 30) -> None:
    """A progress bar on stderr: redrawn in place on a terminal (ending the line when done), one line
    per tenth of the work elsewhere, so a log file is not flooded."""
    filled = width * done // max(total, 1)
    line = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label}"
    if sys.stderr.isatty():
        sys.stderr.write(f"\r\033[K{line}" + ("\n" if done == total else ""))
    elif done == total or done % max(total // 10, 1) == 0:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def add_world_size(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    default: int,
    what: str = "PEs (processes)",
    *,
    aliases: Sequence[str] = (),
    dest: str = "world_size",
) -> None:
    """``--world-size N``: how many processes the bench starts; ``aliases`` keep a bench's older
    spelling (``--world``, ``--pes``) working."""
    parser.add_argument(
        "--world-size",
        *aliases,
        dest=dest,
        type=int,
        default=default,
        metavar="N",
        help=f"{what} to start (default {default})",
    )


def add_json(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    default: Path | None,
    *,
    aliases: Sequence[str] = (),
    dest: str = "json",
    help: str | None = None,
) -> None:
    """``--json PATH``: where the bench writes its results (see :func:`write_json`); ``aliases`` keep
    a bench's older spelling (``--output``, ``--out``) working."""
    text = help or (f"where to write the results (default {default})" if default else "also write the results here")
    parser.add_argument("--json", *aliases, dest=dest, type=Path, default=default, metavar="PATH", help=text)


def write_json(path: Path, document: dict[str, Any], *, indent: int = 2) -> Path:
    """Write a bench's results with :func:`mori._provenance.provenance` under ``"provenance"``
    (creating the folder); returns ``path``."""
    document["provenance"] = provenance()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=indent) + "\n")
    return path
