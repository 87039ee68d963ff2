# SPDX-License-Identifier: MIT
"""NOTE [streamed staging]: the tcp conduit sends a payload that is still being copied into its
send buffer (the cuda backend's staging copies out of the GPU) as its pieces land. Run here on two
PEs' conduits in one process (tests/native/tcp_conduit_staged.cpp), so it is checked without a
GPU: every byte arrives as the source held it (none is sent before it landed: unlanded bytes hold
0xEE), a put-with-signal's data is complete when its signal is seen, and a payload of several
pieces is on its way while they land: its first piece reaches the target before the rest lands."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from native_driver import build_native_driver

LIBRARY_SOURCES = (
    "remote/tcp_conduit.cpp",
    "remote/heap_access.cpp",
    "remote/signal_joins.cpp",
    "remote/stripe_crew.cpp",
    "core/rma_apply.cpp",
    "bootstrap/socket.cpp",
    "bootstrap/handshake_gate.cpp",
    "bootstrap/hmac_sha256.cpp",
    "core/error.cpp",
    "core/log.cpp",
    "core/env.cpp",
)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_native_driver(tmp_path_factory.mktemp("staged"), "tcp_conduit_staged", *LIBRARY_SOURCES)


@pytest.mark.parametrize("mode", ["put", "put_signal"])
@pytest.mark.parametrize("streams", [1, 2])
@pytest.mark.parametrize(
    ("nbytes", "piece"),
    [
        ((3 << 20) + 1, 256 << 10),  # striped over the streams, stripes that end inside a piece
        (600 << 10, 100 << 10),  # two stripes of 300 KiB, pieces that do not divide them
        (100 << 10, 1 << 10),  # one request, a hundred pieces
        (5000, 1000),  # small enough to go with its header: waits for all of it
    ],
)
def test_a_staged_payload_arrives_as_it_landed(
    driver: Path, tmp_path: Path, mode: str, streams: int, nbytes: int, piece: int
) -> None:
    source = np.random.default_rng(nbytes + streams).integers(0, 256, size=nbytes, dtype=np.uint8)
    source[::997] = 0xEE  # the filler's value also occurs in the data
    (tmp_path / "source").write_bytes(source.tobytes())
    out = tmp_path / "out"
    done = subprocess.run(
        [str(driver), str(tmp_path / "source"), str(out), mode, str(streams), str(piece)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Exit 3: nothing had reached PE 1 when the rest of the payload landed (sent only whole).
    assert done.returncode == 0, done.stderr
    received = np.frombuffer(out.read_bytes(), dtype=np.uint8)
    np.testing.assert_array_equal(received, source)
    if mode == "put_signal":
        seen = np.frombuffer(Path(f"{out}.at_signal").read_bytes(), dtype=np.uint8)
        np.testing.assert_array_equal(seen, source, err_msg="the signal arrived before all of its data")
