# SPDX-License-Identifier: MIT
"""mori-cco-bench end to end on the cpu backend: 2 spawned ranks, tiny sizes, both modes. Every row
of the JSON must be there and say 'ok', which is a real check: the bench compares each result
with torch.distributed's (exactly for one-shot and two-shot, within e4m3's rounding for fp8)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ALLREDUCE_VARIANTS = ["one_shot", "two_shot", "auto_fp8", "torch"]
GEMM_VARIANTS = [
    "matmul+torch_ar",
    "matmul+cco_ar",
    "fused",
    "fused_fp8",
    "gemm",
    "cco_ar",
    "cco_ar_fp8",
    "torch_ar",
]


def _run_bench(tmp_path, mode, *extra):
    out = tmp_path / f"{mode}.json"
    command = [sys.executable, "-m", "mori.cco.bench", mode, "--world", "2", "--backend", "cpu"]
    command += ["--warmup", "1", "--iters", "2", "--json", str(out), *extra]
    env = {**os.environ, "MORI_CCO_BACKEND": "cpu"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, f"{' '.join(command)}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert f"mori-cco-bench {mode}: 2 ranks, cpu backend" in proc.stdout  # the table went to stdout
    report = json.loads(out.read_text())
    assert report["mode"] == mode and report["world"] == 2 and report["backend"] == "cpu"
    assert report["dist_backend"] == "gloo" and report["ok"] is True
    for row in report["rows"]:
        assert row["check"] == "ok", row
        assert row["time_us"] > 0 and len(row["time_us_per_rank"]) == 2
        assert row["time_us"] == max(row["time_us_per_rank"])
    return report


def test_bench_cpu_both_modes(tmp_path):
    report = _run_bench(tmp_path, "allreduce", "--min-bytes", "8K", "--max-bytes", "32K")
    assert [(r["size_bytes"], r["variant"]) for r in report["rows"]] == [
        (size, variant) for size in (8192, 32768) for variant in ALLREDUCE_VARIANTS
    ]
    for row in report["rows"]:
        assert row["count"] == row["size_bytes"] // 2  # bfloat16
        assert math.isclose(row["busbw_GBps"], row["algbw_GBps"])  # 2(n-1)/n = 1 for 2 ranks
        assert math.isclose(row["algbw_GBps"], row["size_bytes"] / row["time_us"] / 1e3)
        if row["variant"] in ("one_shot", "two_shot", "torch"):
            assert row["max_rel_err"] == 0.0  # integer inputs: bit for bit
        else:
            assert 0.0 < row["max_rel_err"] < 0.125  # e4m3 really rounds, within its bound

    # 4 chunks of 32 rows: the pipelined path, not one GEMM then one all-reduce.
    report = _run_bench(tmp_path, "gemm-ar", "--m", "128", "--n", "256", "--k", "256", "--chunks", "4")
    assert report["dtype"] == "float32"  # the cpu default
    assert report["gemm"] | {"tflops_per_rank": None} == {
        "m": 128,
        "n": 256,
        "k": 256,
        "k_per_rank": 128,
        "chunks": 4,
        "tflops_per_rank": None,
    }
    rows = {r["variant"]: r for r in report["rows"]}
    assert list(rows) == GEMM_VARIANTS
    for name in ("matmul+torch_ar", "matmul+cco_ar", "fused", "fused_fp8"):
        assert rows[name]["overlap_efficiency"] is not None and rows[name]["speedup_vs_torch"] > 0
    assert rows["fused"]["rel_err"] < 1e-5  # float32: only the summation order differs from the exact sum
    assert 0.0 < rows["fused_fp8"]["rel_err"] < 0.125
