# SPDX-License-Identifier: MIT
"""Slot tables and the code generated from them: the C constants a C compiler sees equal the ids
the Python table names, and stale generated files are caught."""

from __future__ import annotations

import enum
import json
import re

import pytest
from host_probe import host_compiler, run_c_probe

from mori.viz import codegen
from mori.viz.cli import main
from mori.viz.errors import SlotTableError
from mori.viz.slots import SlotTable, resolve_slot_map

TABLE = {
    "prefix": "EP",
    "slots": {"dispatch": ["route", {"name": "copy_tokens", "doc": "rows */ to peers"}], "combine": ["stage"]},
}


def test_ids_names_and_c_names():
    table = SlotTable.from_dict(TABLE)
    assert table.names() == {0: "dispatch/route", 1: "dispatch/copy_tokens", 2: "combine/stage"}
    assert [table.c_name(s) for s in table.slots] == [
        "EP_SLOT_DISPATCH_ROUTE",
        "EP_SLOT_DISPATCH_COPY_TOKENS",
        "EP_SLOT_COMBINE_STAGE",
    ]
    assert table.id("dispatch/copy_tokens") == 1
    assert SlotTable.from_dict(table.to_dict()).names() == table.names()


def test_table_id_is_deterministic_and_tracks_every_name_and_position():
    base = SlotTable.from_dict(TABLE).table_id
    assert base == SlotTable.from_dict(json.loads(json.dumps(TABLE))).table_id
    assert 0 < base < 2**32
    swapped = {"prefix": "EP", "slots": {"dispatch": ["copy_tokens", "route"], "combine": ["stage"]}}
    renamed = {"prefix": "EP", "slots": {"dispatch": ["route", "copy_rows"], "combine": ["stage"]}}
    assert len({base, SlotTable.from_dict(swapped).table_id, SlotTable.from_dict(renamed).table_id}) == 3


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"prefix": "EP", "slots": {}}, "non-empty mapping"),
        ({"prefix": "1EP", "slots": {"a": ["b"]}}, "prefix='1EP'"),
        ({"prefix": "EP", "slots": {"a-b": ["c"]}}, "slot group='a-b'"),
        ({"prefix": "EP", "slots": {"a": "b"}}, "non-empty list"),
        ({"prefix": "EP", "slots": {"a": ["b c"]}}, "slot name in group 'a'='b c'"),
        ({"prefix": "EP", "slots": {"a_b": ["c"], "a": ["b_c"]}}, "EP_SLOT_A_B_C"),
        ({"prefix": "EP", "slots": {"a": ["b"]}, "extra": 1}, "keys 'prefix' and 'slots'"),
        ({"prefix": "EP", "slots": {"a": [f"s{i}" for i in range(65537)]}}, "at most 65536"),
    ],
)
def test_malformed_tables_raise_naming_the_problem(data, match):
    with pytest.raises(SlotTableError, match=re.escape(match)):
        SlotTable.from_dict(data)


def test_from_json_reports_the_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SlotTableError, match=r"bad\.json"):
        SlotTable.from_json(bad)


def test_generated_header_constants_seen_by_a_c_compiler(tmp_path):
    host_compiler()  # skips before anything is written
    table = SlotTable.from_dict(TABLE)
    codegen.write(tmp_path / "ep_slots.h", codegen.render_header(table, source="ep.json"))
    probe = ["#include <stdio.h>", '#include "ep_slots.h"', "int main(void) {"]
    probe += [f'  printf("{table.c_name(s)} %d\\n", (int){table.c_name(s)});' for s in table.slots]
    probe += [
        '  printf("EP_SLOT_TABLE_ID %u\\n", EP_SLOT_TABLE_ID);',
        '  printf("EP_SLOT_COUNT %d\\n", EP_SLOT_COUNT);',
    ]
    # The disabled stubs must be usable statements that evaluate nothing.
    probe += [
        "  EP_VIZ_INIT(viz, (void*)0);",
        "  MORI_VIZ_BEGIN(viz, EP_SLOT_COMBINE_STAGE);",
        "  MORI_VIZ_ONLY(return 3;)",
        "  return 0;",
        "}",
    ]
    out = run_c_probe(tmp_path, probe, tmp_path)
    seen = dict(line.split() for line in out.splitlines())
    assert {table.c_name(s): int(seen[table.c_name(s)]) for s in table.slots} == {
        table.c_name(s): s.id for s in table.slots
    }
    assert int(seen["EP_SLOT_TABLE_ID"]) == table.table_id
    assert int(seen["EP_SLOT_COUNT"]) == 3


def test_generated_python_names(tmp_path):
    table = SlotTable.from_dict(TABLE)
    namespace: dict = {}
    exec(codegen.render_python(table), namespace)
    assert namespace["SLOT_NAMES"] == table.names()
    assert namespace["TABLE_ID"] == table.table_id
    assert namespace["PREFIX"] == "EP"


def test_cli_writes_then_checks(tmp_path):
    source = tmp_path / "slots.json"
    source.write_text(json.dumps(TABLE))
    header, module = tmp_path / "out" / "slots.h", tmp_path / "out" / "slots.py"
    assert main(["codegen", str(source), "--header", str(header), "--python", str(module)]) == 0
    assert header.read_text() == codegen.render_header(SlotTable.from_dict(TABLE), source="slots.json")
    assert main(["codegen", str(source), "--header", str(header), "--python", str(module), "--check"]) == 0
    source.write_text(json.dumps({"prefix": "EP", "slots": {"dispatch": ["route"]}}))
    assert main(["codegen", str(source), "--header", str(header), "--check"]) == 1  # stale: reported, not rewritten
    assert "COPY_TOKENS" in header.read_text()


def test_slot_map_forms():
    class Slots(enum.IntEnum):
        A = 4
        B = 9

    assert resolve_slot_map(Slots) == ({4: "A", 9: "B"}, None)
    assert resolve_slot_map({1: "x"}) == ({1: "x"}, None)
    assert resolve_slot_map({"x": 1}) == ({1: "x"}, None)
    assert resolve_slot_map(None) == ({}, None)
    with pytest.raises(SlotTableError, match="neither"):
        resolve_slot_map({1.5: "x"})
    with pytest.raises(SlotTableError, match="type list"):
        resolve_slot_map(["x"])
