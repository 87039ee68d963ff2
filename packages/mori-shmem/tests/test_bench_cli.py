# SPDX-License-Identifier: MIT
"""mori-shmem-bench's argument handling that needs no measurement."""

from __future__ import annotations

import pytest

from mori.shmem import bench
from mori.shmem.device import shmem_cuda_available


@pytest.mark.skipif(shmem_cuda_available(), reason="with a GPU the command would run the benchmark")
def test_device_proxy_without_a_gpu_says_why():
    with pytest.raises(SystemExit, match="--device-proxy needs a GPU"):
        bench.main(["--device-proxy"])


def test_device_proxy_measures_two_pes():
    with pytest.raises(SystemExit, match="--device-proxy measures 2 PEs"):
        bench.main(["--device-proxy", "--pes", "4"])


def test_remote_rounds_keep_each_size_best_batch(tmp_path):
    """--remote over the tcp conduit on loopback: every size gets a row from the best of its rounds,
    beside both socket-copy ceilings, and the JSON holds what the table printed."""
    import json

    out = tmp_path / "remote.json"
    assert bench.main(["--remote", "--conduit", "tcp", "--min-size", "64K", "--max-size", "1M", "--repeats", "2",
                       "--pingpongs", "20", "--output", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert (report["conduit"], report["repeats"]) == ("tcp", 2)
    assert [row["size_bytes"] for row in report["rows"]] == [64 << 10, 256 << 10, 1 << 20]
    for row in report["rows"]:
        for key in ("put_GBps", "get_GBps", "socket_1_stream_GBps", "socket_2_streams_GBps"):
            assert row[key] > 0, (key, row)
        assert row["put_of_ceiling"] == pytest.approx(
            row["put_GBps"] / max(row["socket_1_stream_GBps"], row["socket_2_streams_GBps"])
        )
    assert report["latency_us_median"] > 0


@pytest.mark.parametrize("scope", ["thread", "warp", "block"])
@pytest.mark.parametrize("size", [8, 4096, 100_000, 1 << 20, 33 << 20, (256 << 20) + 48])
def test_geometry_covers_every_byte_once(scope, size):
    """Each scope's split of a message: slices cover it exactly (whole 16-byte vectors but the last),
    none empty or over the scope's largest slice; block scope has a block per slice, the smaller
    scopes a grid of at most BLOCKS_PER_SM blocks per SM that takes the rest grid-stride."""
    from mori.shmem.bench import gpu as bench_gpu

    sms = 132
    geo = bench_gpu.geometry(scope, size, sms)
    per_block = {"thread": bench_gpu.THREADS_PER_BLOCK, "warp": bench_gpu.WARPS_PER_BLOCK, "block": 1}[scope]
    assert (geo.workers - 1) * geo.slice < size <= geo.workers * geo.slice
    assert geo.slice % 16 == 0 or geo.workers == 1
    assert geo.slice <= bench_gpu.MAX_SLICE[scope] or geo.workers == 1
    blocks_needed = -(-geo.workers // per_block)
    if scope == "block":
        assert geo.blocks == geo.workers
    else:
        assert geo.blocks == min(blocks_needed, bench_gpu.BLOCKS_PER_SM * sms)
