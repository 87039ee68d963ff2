# SPDX-License-Identifier: MIT
"""``mori-umbp-bench``: the measured hits equal those of an independent model of the trace (no
eviction: the pool has room for every block), and every block read back is intact."""

from __future__ import annotations

import json

import pytest

from mori.umbp.bench import cli, trace
from mori.umbp.errors import InvalidArgumentError


def test_replay_hits_match_the_trace_model(tmp_path):
    out = tmp_path / "bench.json"
    argv = ["--requests", "24", "--sessions", "4", "--blocks-per-turn", "2", "--seed", "3",
            "--block-bytes", "65536", "--peers", "2", "--peer-capacity", str(8 << 20), "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    want = trace.expected_hits(trace.synthetic(24, 4, 2, 3))
    assert res["hits_per_request"] == want
    assert res["hit_blocks"] == sum(want) and res["blocks"] == sum(len(r) for r in trace.synthetic(24, 4, 2, 3))
    assert res["hit_rate"] == pytest.approx(sum(want) / res["blocks"])
    assert res["corrupt_blocks"] == 0 and res["put_failed"] == 0
    lat = res["latency_ms"]
    assert lat["request"]["n"] == 24 and lat["request"]["p50"] <= lat["request"]["p99"]
    assert res["requests_per_s"] > 0 and res["MiB_per_s"] > 0


def test_trace_files_are_checked(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text('{"keys": ["a", "b"]}\n\n{"keys": ["a", "b", "c"]}\n')
    assert trace.load(good) == [["a", "b"], ["a", "b", "c"]]
    assert trace.expected_hits(trace.load(good)) == [0, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"keys": ["a"]}\n{"key": 1}\n')
    with pytest.raises(InvalidArgumentError, match=r"bad.jsonl:2: expected"):
        trace.load(bad)
