# SPDX-License-Identifier: MIT
"""``mori-ep-bench`` verifies what it times: every kernel type on 2 and 4 PEs (cpu backend, tiny
shapes) passes the check against mori.ep.reference and says so in its report; a corrupted output
row on one PE fails the run with a message naming the PE, the kernel type, the row and the values;
``--no-verify`` says the run was not verified."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mori.ep import bench

KERNEL_TYPES = sorted(bench.KERNEL_TYPES)
#: fp8 tokens with scales and bf16 combine like the default job, small enough for 2 cores.
TINY = [
    "--backend", "cpu", "--max-tokens", "16", "--hidden", "64", "--topk", "4", "--experts", "16",
    "--scale-dim", "4", "--iterations", "2", "--warmup", "1", "--timeout", "240",
]  # fmt: skip


def _bench(tmp_path: Path, *args: str) -> tuple[int, dict]:
    report = tmp_path / "bench.json"
    code = bench.main([*TINY, "--json", str(report), *args])
    return code, json.loads(report.read_text())


@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("kernel_type", KERNEL_TYPES)
def test_every_kernel_type_is_verified(tmp_path: Path, kernel_type: str, world_size: int) -> None:
    code, report = _bench(tmp_path, "--world-size", str(world_size), "--kernel-type", kernel_type)
    assert code == 0
    assert report["verified"] is True
    assert report["verification"]["failures"] == []
    assert any("combined rows" in c for c in report["verification"]["checked"])
    for case in report["results"]:
        assert case["verified"] is True
        assert sum(case["total_recv"]) > 0, "the workload must move rows"
        # fp8 rows summed at most 4 times: exact in fp32 and, per node, in bf16.
        assert case["combine_tolerance"]["rtol"] == 0.0
    for pe in report["raw"]:
        assert all(entry["verification"]["ok"] for entry in pe["cases"])
    if kernel_type in bench._INTER_NODE:  # network rows stand beside a socket copy of their bytes
        for case in report["results"]:
            for phase in ("dispatch", "combine"):
                row = case[phase]
                assert row["network_bytes_per_pe"] > 0 and row["socket_gbps"] > 0
                assert row["network_over_socket"] == pytest.approx(row["network_gbps"] / row["socket_gbps"])


def test_an_fp8_combine_format_is_verified(tmp_path: Path) -> None:
    # bf16 tokens cast to fp8 on the way back: the reference applies the same (saturating) cast,
    # and fp8 values summed twice are exact, so no tolerance is needed.
    code, report = _bench(
        tmp_path, "--world-size", "2", "--dtype", "bfloat16", "--scale-dim", "0", "--quant-type", "fp8_direct_cast",
        "--zero-copy", "0",
    )  # fmt: skip
    assert code == 0 and report["verified"] is True
    assert report["results"][0]["combine_tolerance"]["rtol"] == 0.0


def _corrupted_run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mori.ep.bench", *TINY, "--json", str(tmp_path / "bench.json"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(
    ("kernel_type", "phase", "field"),
    [("IntraNode", "dispatch", "token data"), ("InterNodeV1", "combine", "combined")],
)
def test_a_wrong_row_fails_the_run(tmp_path: Path, kernel_type: str, phase: str, field: str) -> None:
    result = _corrupted_run(
        tmp_path, "--world-size", "2", "--kernel-type", kernel_type, "--test-only-corrupt", f"1:{phase}"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert f"verification failed on PE 1: kernel type {kernel_type}" in result.stderr, result.stderr[-3000:]
    assert f"{phase}: row " in result.stderr and f", {field} (" in result.stderr, result.stderr[-3000:]
    assert "got [" in result.stderr and "expected [" in result.stderr
    assert "verification failed on PE 0" not in result.stderr, "only PE 1's row was corrupted"
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["verified"] is False
    assert len(report["verification"]["failures"]) == 1


def test_no_verify_is_recorded(tmp_path: Path) -> None:
    # The same corruption goes unnoticed without the check, and the report says so.
    code, report = _bench(tmp_path, "--world-size", "2", "--no-verify", "--test-only-corrupt", "1:dispatch")
    assert code == 0
    assert report["verified"] is False
    assert report["verification"]["checked"] == []
    assert all(entry["verification"] is None for pe in report["raw"] for entry in pe["cases"])


def test_a_malformed_corruption_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--test-only-corrupt", "one:dispatch"])
