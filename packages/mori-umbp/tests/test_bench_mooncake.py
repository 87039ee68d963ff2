# SPDX-License-Identifier: MIT
"""Mooncake Store beside mori-umbp in ``mori-umbp-bench``: where it cannot run, the JSON and the
output say why and hold no Mooncake figure; where it is installed (pip install
mooncake-transfer-engine-non-cuda) and user namespaces are allowed, it runs the same workloads
for real, checked against the trace model and byte for byte."""

from __future__ import annotations

import json
import subprocess

import pytest

from mori.umbp.bench import cli, mooncake, trace

TRACE = ["--requests", "24", "--sessions", "4", "--blocks-per-turn", "2", "--seed", "3", "--block-bytes", "65536"]
OPS = ["--mode", "ops", "--blocks", "16384", "--threads", "1", "--bytes-per-case", str(64 << 14), "--max-keys", "64"]


def _namespace_refusal() -> str | None:
    """Why an unprivileged user and network namespace cannot be made here, or None."""
    try:
        done = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--net", "true"], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare: {exc}"
    return None if done.returncode == 0 else f"unshare refused: {done.stderr.decode(errors='replace').strip()}"


@pytest.mark.parametrize("mode", ["trace", "ops"])
def test_without_mooncake_the_json_says_why(tmp_path, monkeypatch, capsys, mode):
    # No unshare on PATH (and, on a machine without Mooncake, no Mooncake): it cannot be measured.
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    why = mooncake.unavailable_reason()
    assert why is not None
    assert ("not installed" in why) if mooncake.version() is None else ("unshare" in why)
    out = tmp_path / "b.json"
    argv = [*(TRACE if mode == "trace" else OPS), "--peer-capacity", str(8 << 20), "--out", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    mc = res["mooncake_store"]
    assert mc["measured"] is False and mc["not_measured"] == why and mc["version"] == mooncake.version()
    assert f"not measured: {why}" in capsys.readouterr().out
    if mode == "trace":
        assert "hit_rate" not in mc and all(mooncake.NAME not in r for r in res["rounds"])
    else:
        assert {c["store"] for c in res["cases"]} == {"mori-umbp"}


@pytest.fixture
def mooncake_here():
    why = mooncake.unavailable_reason() or _namespace_refusal()
    if why:
        pytest.skip(f"Mooncake Store cannot run here: {why}")


def test_mooncake_replays_the_trace_beside_mori_umbp(tmp_path, mooncake_here):
    out = tmp_path / "b.json"
    assert cli.main([*TRACE, "--peer-capacity", str(32 << 20), "--rounds", "2", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    want = trace.expected_hits(trace.synthetic(24, 4, 2, 3))
    mc = res["mooncake_store"]
    assert mc["measured"] is True and mc["not_measured"] is None
    assert mc["version"].startswith("mooncake-transfer-engine") and "--rpc_address=127.0.0.2" in mc["master_flags"]
    assert len(res["rounds"]) == 2
    for r in res["rounds"]:
        got = r[mooncake.NAME]
        # Room for every block: Mooncake's hits are the model's, and every byte read back is intact.
        assert got["hits_per_request"] == want and got["corrupt_blocks"] == 0 and got["put_failed"] == 0
        assert r["mori-umbp"]["hits_per_request"] == want
    assert mc["hit_rate"] == pytest.approx(sum(want) / res["blocks"]) and mc["requests_per_s"] > 0


def test_mooncake_runs_the_ops_cases_beside_mori_umbp(tmp_path, mooncake_here):
    out = tmp_path / "b.json"
    assert cli.main([*OPS, "--apis", "single,batch", "--batch", "8", "--peer-capacity", str(32 << 20),
                     "--out", str(out)]) == 0  # fmt: skip
    res = json.loads(out.read_text())
    cases = [c for c in res["cases"] if c["store"] == mooncake.NAME]
    assert sorted((c["api"], c["op"]) for c in cases) == [("batch", "get"), ("batch", "put"), ("single", "get"),
                                                          ("single", "put")]  # fmt: skip
    for c in cases:
        assert c["keys"] == 64 and c["failed"] == 0 and c["corrupt"] == 0 and c["ops_per_s"] > 0
    assert res["mooncake_store"]["measured"] is True
    assert len(res["summary"]) == 8  # 2 APIs x 2 ops x 2 stores
