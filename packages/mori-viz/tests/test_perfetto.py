# SPDX-License-Identifier: MIT
"""export_to_perfetto on synthetic buffers: the JSON is parsed back and checked against the
hand-written expectations of scenarios.py, and for Chrome trace well-formedness (Perfetto's
TraceProcessor is used too where its binary is installed: it downloads one otherwise)."""

from __future__ import annotations

import json
import shutil

import pytest
import scenarios
from chrome_checks import check_chrome_trace
from synthetic import Warp, build

import mori.kernel_profiler
import mori.viz
import mori.viz.cli
from mori.viz.errors import InvalidArgumentError, SlotTableError
from mori.viz.slots import SlotTable


def _export(tmp_path, **kwargs):
    table = SlotTable.from_dict(scenarios.TABLE)
    path = tmp_path / "trace.json"
    report = mori.viz.export_to_perfetto(scenarios.buffers(table.table_id), path, table, **kwargs)
    return json.loads(path.read_text()), report


def _names(document):
    processes = {e["pid"]: e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"}
    return processes, threads


def test_slices_instants_and_tracks_grouped_by_block(tmp_path):
    document, report = _export(tmp_path)
    check_chrome_trace(document)
    processes, threads = _names(document)
    assert sorted(processes.values()) == ["PE 0 / block 0", "PE 1 / block 1"]
    slices = sorted(
        (
            processes[e["pid"]],
            threads[(e["pid"], e["tid"])].split(" (")[0],
            e["name"],
            e["ts"],
            e["dur"],
            e["args"]["depth"],
        )
        for e in document["traceEvents"]
        if e["ph"] == "X"
    )
    expected = sorted(
        (
            f"PE {pe} / block {block}",
            f"warp {warp}",
            name,
            (start - scenarios.ORIGIN_NS) / 1000,
            (end - start) / 1000,
            depth,
        )
        for pe, block, warp, name, start, end, depth in scenarios.SLICES
    )
    assert slices == expected
    instants = [
        (processes[e["pid"]], e["name"], e["ts"], e["args"]["arg"]) for e in document["traceEvents"] if e["ph"] == "i"
    ]
    assert instants == [("PE 0 / block 0", "kernel/done", (2100 - 500) / 1000, 42)]
    assert all(e["cat"] == "kernel" for e in document["traceEvents"] if e["ph"] != "M")
    assert "warp 0 (slot 0, SM 4)" in threads.values()
    assert document["otherData"]["origin_globaltimer_ns"] == scenarios.ORIGIN_NS
    assert (report.slices, report.instants, report.tracks) == (5, 1, 3)
    assert (report.orphan_ends, report.unclosed_begins, report.overwritten_events) == (1, 1, 0)
    assert report.path == tmp_path / "trace.json"


def test_grouped_by_pe(tmp_path):
    document, _ = _export(tmp_path, group_by="pe")
    check_chrome_trace(document)
    processes, threads = _names(document)
    assert sorted(processes.values()) == ["PE 0", "PE 1"]
    assert sorted(name.split(" (")[0] for name in threads.values()) == [
        "block 0 / warp 0",
        "block 0 / warp 1",
        "block 1 / warp 0",
    ]
    with pytest.raises(InvalidArgumentError, match="group_by='sm'"):
        mori.viz.export_to_perfetto(scenarios.buffers(), tmp_path / "x.json", group_by="sm")


def test_nested_slices_sit_inside_their_parent(tmp_path):
    document, _ = _export(tmp_path)
    slices = [e for e in document["traceEvents"] if e["ph"] == "X"]
    for child in (e for e in slices if e["args"]["depth"] == 1):
        parents = [
            p for p in slices if p["args"]["depth"] == 0 and (p["pid"], p["tid"]) == (child["pid"], child["tid"])
        ]
        assert any(p["ts"] <= child["ts"] and child["ts"] + child["dur"] <= p["ts"] + p["dur"] for p in parents)


def test_names_without_a_table_and_with_a_dict(tmp_path):
    document, _ = mori.viz.chrome_trace(scenarios.buffers())
    assert {e["name"] for e in document["traceEvents"] if e["ph"] == "X"} == {"slot 0", "slot 1"}
    document, _ = mori.viz.chrome_trace(scenarios.buffers(), {0: "outer"})
    assert {e["name"] for e in document["traceEvents"] if e["ph"] == "X"} == {"outer", "slot 1"}


def test_a_table_other_than_the_kernels_is_refused(tmp_path):
    table = SlotTable.from_dict(scenarios.TABLE)
    with pytest.raises(SlotTableError, match=f"built with slot table 0x{table.table_id + 1:08x}"):
        mori.viz.export_to_perfetto(scenarios.buffers(table.table_id + 1), tmp_path / "t.json", table)
    report = mori.viz.export_to_perfetto(
        scenarios.buffers(table.table_id + 1), tmp_path / "t.json", table, check_table=False
    )
    assert report.slices == 5


def test_two_buffers_of_one_pe_are_refused():
    raw = scenarios.buffers()[0]
    with pytest.raises(InvalidArgumentError, match=r"buffers\[0\] and buffers\[1\] both belong to PE 0"):
        mori.viz.chrome_trace([raw, raw])
    with pytest.raises(InvalidArgumentError, match="empty list"):
        mori.viz.chrome_trace([])


def test_overwritten_events_are_reported(tmp_path):
    warp = Warp(block=0, warp=0)
    for i in range(6):
        warp.begin(10 * i, 0).end(10 * i + 5, 0)
    report = mori.viz.export_to_perfetto(build(1, 4, {0: warp}), tmp_path / "w.json")
    assert (report.slices, report.overwritten_events, report.orphan_ends) == (2, 8, 0)


def test_kernel_profiler_alias_is_the_same_api():
    assert mori.kernel_profiler.export_to_perfetto is mori.viz.export_to_perfetto
    assert mori.kernel_profiler.read_trace is mori.viz.read_trace


def test_perfetto_trace_processor_reads_it(tmp_path):
    perfetto = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed")
    shell = shutil.which("trace_processor_shell")
    if shell is None:
        pytest.skip("trace_processor_shell is not installed (TraceProcessor would download it; no network here)")
    _, report = _export(tmp_path)
    config = perfetto.TraceProcessorConfig(bin_path=shell)
    with perfetto.TraceProcessor(trace=str(tmp_path / "trace.json"), config=config) as tp:
        rows = list(tp.query("select name, ts, dur, depth from slice where dur > 0 order by ts"))
    assert len(rows) == report.slices
    assert sorted((r.name, r.dur) for r in rows) == sorted((n, e - s) for *_, n, s, e, _d in scenarios.SLICES)


def test_cli_export_from_saved_buffers(tmp_path, capsys):
    table = SlotTable.from_dict(scenarios.TABLE)
    (tmp_path / "slots.json").write_text(json.dumps(scenarios.TABLE))
    files = []
    for pe, raw in enumerate(scenarios.buffers(table.table_id)):
        files.append(str(tmp_path / f"pe{pe}.bin"))
        (tmp_path / f"pe{pe}.bin").write_bytes(raw)
    out = tmp_path / "cli.json"
    assert (
        mori.viz.cli.main(["export", *files, "--out", str(out), "--slots", str(tmp_path / "slots.json"), "--summary"])
        == 0
    )
    expected, _ = mori.viz.chrome_trace(scenarios.buffers(table.table_id), table)
    assert json.loads(out.read_text()) == json.loads(json.dumps(expected))
    printed = capsys.readouterr().out
    assert "5 slices, 1 instants, 3 tracks" in printed and "kernel/outer" in printed
