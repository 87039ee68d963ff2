# SPDX-License-Identifier: MIT
"""``mori-umbp-bench``: the measured hits equal those of an independent model of the trace (no
eviction: the pool has room for every block), and every block read back is intact."""

from __future__ import annotations

import ctypes
import json
import struct

import pytest

from mori.umbp import UMBPClient, UMBPConfig, UMBPDramConfig
from mori.umbp.bench import cli, ops, trace
from mori.umbp.errors import InvalidArgumentError


@pytest.mark.parametrize("layout", ["processes", "single"])
def test_replay_hits_match_the_trace_model(tmp_path, layout):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["--requests", "24", "--sessions", "4", "--blocks-per-turn", "2", "--seed", "3",
            "--block-bytes", "65536", "--peers", "2", "--peer-capacity", str(8 << 20), "--out", str(out),
            "--png", str(png), "--pool-layout", layout, "--skip_mooncake"]  # fmt: skip
    assert cli.main(argv) == 0
    _check_png(png)
    res = json.loads(out.read_text())
    want = trace.expected_hits(trace.synthetic(24, 4, 2, 3))
    assert res["hits_per_request"] == want
    assert res["hit_blocks"] == sum(want) and res["blocks"] == sum(len(r) for r in trace.synthetic(24, 4, 2, 3))
    assert res["hit_rate"] == pytest.approx(sum(want) / res["blocks"])
    assert res["corrupt_blocks"] == 0 and res["put_failed"] == 0 and res["lost_after_probe"] == 0
    assert res["stored_at_end"] == len({k for r in trace.synthetic(24, 4, 2, 3) for k in r})  # room for all
    lat = res["latency_ms"]
    assert lat["request"]["n"] == 24 and lat["request"]["p50"] <= lat["request"]["p99"]
    assert res["requests_per_s"] > 0 and res["MiB_per_s"] > 0
    # The pool has room for every block: every ceiling is the unlimited pool's.
    rate = sum(want) / res["blocks"]
    for key in (
        "hit_rate_policy_ceiling",
        "hit_rate_policy_with_leases",
        "hit_rate_policy_per_chunk",
        "hit_rate_opt",
        "hit_rate_unlimited_pool",
    ):
        assert res[key] == pytest.approx(rate), key
    assert res["ceiling_model"]["capacity_blocks"] == 2 * (int((8 << 20) * 0.9) // 65536)
    assert res["ceiling_model"]["capacity_blocks_opt"] == 2 * (8 << 20) // 65536
    assert res["mooncake_store"]["measured"] is False
    assert res["mooncake_store"]["not_measured"] == "skipped (--skip_mooncake)"
    assert res["config"]["pool_layout"] == layout


def test_prepared_blocks_replay_the_same_hits_and_check_every_byte(tmp_path):
    """--prepared-blocks: the same trace, the same hits as the model, no block corrupt."""
    out = tmp_path / "bench.json"
    argv = ["--requests", "24", "--sessions", "4", "--blocks-per-turn", "2", "--seed", "3",
            "--block-bytes", "65536", "--peers", "2", "--peer-capacity", str(8 << 20), "--out", str(out),
            "--pool-layout", "single", "--skip_mooncake", "--prepared-blocks"]  # fmt: skip
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["config"]["prepared_blocks"] is True
    assert res["hits_per_request"] == trace.expected_hits(trace.synthetic(24, 4, 2, 3))
    assert res["corrupt_blocks"] == 0 and res["put_failed"] == 0


def test_prepared_blocks_differ_per_key_and_a_wrong_block_is_caught():
    import numpy as np

    from mori.umbp.bench.runner import PreparedBlocks

    keys = [f"k{i}" for i in range(50)]
    blocks = PreparedBlocks([*keys, *keys[:10]], 4096)  # repeats share their block
    bufs = [np.zeros(4096, np.uint8) for _ in keys]
    for buf, key in zip(bufs, keys, strict=True):
        blocks.fill(buf, key)
        assert blocks.matches(buf, key)
    assert len({buf.tobytes() for buf in bufs}) == len(keys)
    assert not blocks.matches(bufs[1], "k0")  # another key's block
    bufs[0][4095] ^= 1
    assert not blocks.matches(bufs[0], "k0")  # one flipped bit


def _check_png(path):
    """A real PNG of the figure's size: 11 x 4 inches at 100 dpi, read from its IHDR chunk."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    assert struct.unpack(">II", raw[16:24]) == (1100, 400)
    assert len(raw) > 10_000  # two plots with axes and curves, not an empty canvas


def test_trace_files_are_checked(tmp_path):
    good = tmp_path / "t.jsonl"
    good.write_text('{"keys": ["a", "b"]}\n\n{"keys": ["a", "b", "c"]}\n')
    assert trace.load(good) == [["a", "b"], ["a", "b", "c"]]
    assert trace.expected_hits(trace.load(good)) == [0, 2]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"keys": ["a"]}\n{"key": 1}\n')
    with pytest.raises(InvalidArgumentError, match=r"bad.jsonl:2: expected"):
        trace.load(bad)


def test_the_hbm_profile_without_a_gpu_says_why(tmp_path, capsys):
    from mori.umbp.devmem import gpu_unavailable_reason

    why = gpu_unavailable_reason()
    if not why:
        pytest.skip("this machine has a GPU: test_hbm_gpu.py runs the HBM profile")
    argv = ["--requests", "2", "--profile", "hbm", "--peers", "1", "--out", str(tmp_path / "b.json")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"mori-umbp-bench --profile hbm: hbm.capacity_bytes={256 << 20} needs a CUDA GPU: {why}" in err
    assert not (tmp_path / "b.json").exists()


class _Spoiling:
    """A real local-mode client whose gets of ``spoil`` come back with one byte changed and whose
    gets of ``drop`` report a miss: what the ops case's checks must count."""

    def __init__(self, client, spoil: str, drop: str) -> None:
        self.client, self.spoil, self.drop = client, spoil, drop

    def __getattr__(self, name):
        return getattr(self.client, name)

    def batch_get_into_ptr(self, keys, ptrs, sizes):
        ok = self.client.batch_get_into_ptr(keys, ptrs, sizes)
        for i, key in enumerate(keys):
            if key == self.spoil:
                cell = ctypes.c_uint8.from_address(ptrs[i] + 5)
                cell.value ^= 0xFF
            if key == self.drop:
                ok[i] = False
        return ok


def test_ops_case_checks_every_block_after_timing():
    """Gets land in places of their own, checked after the timed phase: a changed byte counts as
    corrupt, a reported miss as failed, and every other block read back intact."""
    block, batch, keys = 4096, 4, 16
    cfg = UMBPConfig(dram=UMBPDramConfig(64 * block, block, 0.9, 0.7))
    with UMBPClient(cfg) as real:
        tag = "t"
        name = lambda t, i: f"{tag}-{block}-batch-2-{t}-{i}"  # noqa: E731 - run_case's naming
        client = _Spoiling(real, spoil=name(1, 5), drop=name(0, 2))
        put, get = ops.run_case(client, _NoPool(), tag, block, "batch", 2, keys, batch)
        # The untimed warm-up put a batch per thread too: stored, not counted.
        warm = [f"{tag}-{block}-batch-2-{t}-warm-{j}" for t in range(2) for j in range(batch)]
        assert real.batch_exists(warm) == [True] * len(warm)
    assert put.keys == get.keys == keys and put.failed == 0
    assert get.failed == 1 and get.corrupt == 1
    assert len(put.call_s) == len(get.call_s) == keys // batch and get.wall_s > 0


def test_ops_cases_time_at_least_min_calls_whatever_the_bytes_per_case():
    """A case's p50 is over several calls even where --bytes-per-case holds fewer blocks than a
    batch (2 MiB blocks: 32 MiB is one batch of 16), and the ceiling's share is of warmed calls."""
    block, batch = 65536, 4
    out = ops.run(
        [block], ["single", "batch"], [1], batch, block, 2000, 2, 8 << 20,
        lambda master, page: cli._client(master, "bench-client", 0, page, 4 << 20),
        "single", 1, False,
    )  # fmt: skip
    calls = {(c["api"], c["op"]): c["calls"] for c in out["cases"]}
    assert calls == {(api, op): ops.MIN_CALLS for api in ("single", "batch") for op in ("put", "get")}
    keys = {c["api"]: c["keys"] for c in out["cases"]}
    assert keys == {"single": ops.MIN_CALLS, "batch": ops.MIN_CALLS * batch}
    assert all(c["failed"] == 0 and c["corrupt"] == 0 for c in out["cases"])
    # The defaults' 2 MiB batch (32 MiB a case) takes four calls; 8 MiB blocks stop at half the pool.
    mib, pool = 1 << 20, 2 * (256 << 20)
    assert ops.case_keys("batch", 2 * mib, 16, 32 * mib, 2000, pool) == 64
    assert ops.case_keys("single", 2 * mib, 16, 32 * mib, 2000, pool) == 16
    assert ops.case_keys("batch", 8 * mib, 16, 32 * mib, 2000, pool) == 32
    assert ops.case_keys("batch", 64 * mib, 16, 32 * mib, 2000, pool) == 16  # one call, whatever the pool
    assert ops.case_keys("single", 16384, 16, 32 * mib, 2000, pool) == 2000
    # A case whose one call per thread holds more than half the pool is not measured, and says so.
    assert ops.overfills("batch", 2 * mib, 16, 4, pool) == ""
    assert "over half the pool" in ops.overfills("batch", 8 * mib, 16, 4, pool)
    assert ops.overfills("batch", 8 * mib, 16, 1, pool) == ""
    assert out["skipped"] == []


def test_an_ops_case_that_would_overfill_the_pool_is_skipped_by_name():
    block, batch = 65536, 16
    out = ops.run(
        [block], ["single", "batch"], [1, 2], batch, block, 2000, 2, 512 << 10,
        lambda master, page: cli._client(master, "bench-client", 0, page, 4 << 20),
        "single", 1, False,
    )  # fmt: skip
    # 2 x 512 KiB of peers: half is 8 blocks; a batch of 16 on any thread count overfills it.
    assert [(c["api"], c["threads"]) for c in out["skipped"]] == [("batch", 1), ("batch", 2)]
    assert {(c["api"], c["threads"]) for c in out["cases"]} == {("single", 1), ("single", 2)}


class _NoPool:
    def cpu_s(self) -> float:  # the local mode has no processes of its own
        return 0.0


@pytest.mark.parametrize("layout", ["processes", "single"])
def test_the_ceiling_spreads_a_batch_over_every_peer_process(layout):
    """With a process per peer, the ceiling also moves each batch in even shares to every peer's
    process at once, as a batch put spreads over its owners; in one process there is one target."""
    from mori.umbp.bench.pool import PoolProcess

    block, count = 65536, 5
    with PoolProcess(2, 8 << 20, block, count * block, layout) as pool:
        ceiling = ops.Ceiling(pool, count * block)
        try:
            got = ceiling.measure(block, count, 3)
            single = ceiling.measure(block, 1, 3)
        finally:
            ceiling.close()
    spread = layout == "processes"
    assert len(pool.info.targets) == (2 if spread else 1)
    names = ["write", "read"] + (["write_spread", "read_spread"] if spread else [])
    assert sorted(k for k in got if k.startswith(("write", "read"))) == sorted(names)
    assert all(got[n]["GB_per_s"] > 0 and got[n]["p50_ms"] > 0 for n in names)
    assert "write_spread" not in single  # one block goes to one peer
    assert ops._even(5, 2) == [range(0, 2), range(2, 5)]
    assert ops._even(2, 3) == [range(0, 0), range(0, 1), range(1, 2)]
