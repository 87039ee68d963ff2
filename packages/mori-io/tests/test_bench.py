# SPDX-License-Identifier: MIT
"""mori-io-bench end to end on a tiny sweep: table, JSON, validation and the ceiling."""

from __future__ import annotations

import json

from mori.io.bench import cli


def test_bench_tiny_sweep_writes_json(tmp_path, capsys):
    out = tmp_path / "io.json"
    argv = ["--op_type", "read", "--start_block_size", "4096", "--max_block_size", "8192", "--max_batch_size", "4",
            "--num_iter", "5", "--warmup_iter", "1", "--num_threads", "2", "--num_data_conns", "2",
            "--skip_mooncake", "--json", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    points = doc["points"]
    assert {p["transport"] for p in points} == {"mori-io", "socket-ceiling"}
    assert len(points) == 2 * 2 * 3  # 2 transports x 2 block sizes x batch 1, 2, 4
    assert all(p["gbps"] > 0 and p["op"] == "READ" and p["threads"] == 2 for p in points)
    assert all(p["iterations"] == 5 for p in points)  # the default 3 rounds share the 5 iterations
    assert doc["notes"]["mori-io validated"] == "True"
    assert "mori-io GB/s" in capsys.readouterr().out


def test_bench_refuses_an_empty_sweep_and_no_rounds():
    assert cli.main(["--start_block_size", "8192", "--max_block_size", "4096"]) == 2
    assert cli.main(["--rounds", "0"]) == 2
