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
