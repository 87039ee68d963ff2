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
            "--skip_mooncake", "--idle_seconds", "0.2", "--json", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    doc = json.loads(out.read_text())
    points = doc["points"]
    assert {p["transport"] for p in points} == {"mori-io", "socket-ceiling", "socket-2-streams"}
    assert len(points) == 3 * 2 * 3  # 3 transports x 2 block sizes x batch 1, 2, 4
    assert all(p["gbps"] > 0 and p["op"] == "READ" and p["threads"] == 2 for p in points)
    assert all(p["iterations"] == 5 for p in points)  # the default 3 rounds share the 5 iterations
    assert all(p["lat_p50_us"] <= p["lat_p90_us"] <= p["lat_p99_us"] for p in points)
    # Every side's CPU is read from its own process: both sides do work for every transport.
    assert all(p["cpu_s_per_gb_initiator"] > 0 and p["cpu_s_per_gb_target"] > 0 for p in points)
    assert doc["notes"]["mori-io validated"] == "True"
    assert "initiator" in doc["notes"]["idle cpu"] and "target" in doc["notes"]["idle cpu"]
    by_key = {(p["transport"], p["block_size"], p["batch_size"]): p for p in points}
    assert len(doc["ratios"]) == 2 * 3
    for r in doc["ratios"]:
        mori = by_key[("mori-io", r["block_size"], r["batch_size"])]
        one = by_key[("socket-ceiling", r["block_size"], r["batch_size"])]
        many = by_key[("socket-2-streams", r["block_size"], r["batch_size"])]
        assert r["p50_over_socket"] == mori["lat_p50_us"] / one["lat_p50_us"]
        assert r["gbps_over_streams"] == mori["gbps"] / many["gbps"]
    assert doc["provenance"]
    printed = capsys.readouterr().out
    assert "p90 us" in printed and "p50 / socket" in printed


def test_cpu_seconds_cover_the_timed_iterations_only():
    """A warm-up that burns CPU is not counted; timed iterations that burn it are, on both sides
    (the target clock here is this process's, read through the same hook)."""
    import time

    calls = []

    def burn() -> None:
        end = time.process_time() + 0.02
        while time.process_time() < end:
            pass

    def step() -> None:
        calls.append(1)
        burn()

    samples = runner.time_iterations([step], 2, 5, target_cpu=time.process_time)
    assert len(calls) == 7
    assert 0.035 <= samples.cpu_initiator < 0.09  # 2 x 20 ms, the 5 warm-ups (100 ms) left out
    assert samples.cpu_target is not None and 0.035 <= samples.cpu_target < 0.09


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
