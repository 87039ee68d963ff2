# SPDX-License-Identifier: MIT
"""mori-io-bench end to end on a tiny sweep: table, JSON, validation and the ceiling."""

from __future__ import annotations

import json
import random

from mori.io.bench import cli, runner


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


def test_wall_time_covers_the_timed_iterations_of_a_step_that_keeps_the_gil():
    """The run's wall time comes from the workers' clocks. A step that holds the GIL (sorting in C
    here; a transfer found done before its wait in the benchmark) kept a coordinating thread from
    starting the run's clock until it had run, and GB/s came out too high."""
    data = [random.random() for _ in range(100_000)]

    def step() -> None:
        sorted(data)

    for threads in (1, 2):
        samples = runner.time_iterations([step] * threads, 3, 1)
        assert len(samples.latencies) == 3 * threads
        busiest = max(sum(samples.latencies[i * 3 : (i + 1) * 3]) for i in range(threads))
        assert samples.seconds >= busiest
