# SPDX-License-Identifier: MIT
"""mori.bench_report: cells line up under their titles, size ladders and labels follow their
definitions, the shared flags keep their older spellings and attribute names, and the JSON carries
its provenance."""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import pytest

from mori.bench_report import Column, add_json, add_world_size, human_size, optional, size_ladder, table, write_json


def test_cells_line_up_under_their_titles() -> None:
    columns = [Column("size", 6, align="<"), Column("GB/s", 8, ".2f"), Column("ratio", 7, ".0%")]
    lines = table(columns, [("4K", 1.234, 0.5), ("64M", 12.5, 1.25), ("1G",)])
    head, rule, *rows = lines
    assert rule == "-" * len(head)
    assert head == f"{'size':<6} {'GB/s':>8} {'ratio':>7}"
    assert rows[0] == f"{'4K':<6} {'1.23':>8} {'50%':>7}"
    assert rows[1] == f"{'64M':<6} {'12.50':>8} {'125%':>7}"
    assert rows[2] == f"{'1G':<6}"  # a row may stop early
    with pytest.raises(ValueError, match="4 values for a table of 3 columns"):
        table(columns, [(1, 2, 3, 4)])


def test_optional_cells() -> None:
    assert optional(None, ".2f") == "-"
    assert optional(0.125, ".2f") == "0.12"


@pytest.mark.parametrize(
    ("size", "label"),
    [
        (1000, "1000"),
        (4096, "4K"),
        (6 << 10, "6K"),
        (1 << 20, "1M"),
        (1536 << 10, "1536K"),
        (1 << 30, "1G"),
        (3 << 30, "3G"),
    ],
)
def test_human_size_uses_the_largest_unit_that_divides(size: int, label: str) -> None:
    assert human_size(size) == label


def test_size_ladder_steps_by_the_factor_and_ends_at_high() -> None:
    assert size_ladder(4096, 65536) == [4096, 16384, 65536]
    assert size_ladder(4096, 100000) == [4096, 16384, 65536, 100000]
    assert size_ladder(1, 8, factor=2) == [1, 2, 4, 8]
    assert size_ladder(7, 7) == [7]
    for low, high, factor in ((0, 8, 2), (8, 4, 2), (1, 8, 1)):
        with pytest.raises(ValueError, match="size ladder"):
            size_ladder(low, high, factor)


def test_shared_flags_keep_old_spellings_and_attribute_names() -> None:
    parser = argparse.ArgumentParser()
    add_world_size(parser, 2, aliases=("--pes",), dest="pes")
    add_json(parser, Path("out.json"), aliases=("--output",), dest="output")
    assert parser.parse_args([]).pes == 2 and parser.parse_args([]).output == Path("out.json")
    assert parser.parse_args(["--world-size", "8"]).pes == 8
    assert parser.parse_args(["--pes", "4"]).pes == 4
    assert parser.parse_args(["--json", "a.json"]).output == Path("a.json")
    assert parser.parse_args(["--output", "b.json"]).output == Path("b.json")


def test_write_json_adds_provenance(tmp_path: Path) -> None:
    path = write_json(tmp_path / "sub" / "r.json", {"rows": [1, 2]})
    document = json.loads(path.read_text())
    assert document["rows"] == [1, 2]
    assert document["provenance"]["python"] == platform.python_version()
