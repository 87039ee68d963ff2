# SPDX-License-Identifier: MIT
"""NOTE [stripe-first staging]: the order in which the cuda backend's staging copies a transfer's
pieces out of the GPU, so that every stripe the tcp conduit sends on a connection of its own starts
early. Checked on the native function (tests/native/stripe_first_order.cpp) against what the order
must give: every piece once, the pieces holding the stripes' first bytes before any other, and
each stripe's other pieces in address order."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from native_driver import build_native_driver

KIB = 1 << 10


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_native_driver(tmp_path_factory.mktemp("stripe_first"), "stripe_first_order")


def orders(driver: Path, cases: list[tuple[int, int, int]]) -> list[list[int]]:
    text = "".join(f"{b} {p} {s}\n" for b, p, s in cases)
    out = subprocess.run([str(driver)], input=text, capture_output=True, text=True, check=True, timeout=60).stdout
    return [[int(x) for x in line.split()] for line in out.splitlines()]


def test_worked_examples(driver: Path) -> None:
    # 1 MiB over two 512 KiB stripes in four 256 KiB pieces: each stripe's first piece, then the seconds.
    # 700 KiB: stripes of 358,400 bytes, so piece 1 (256-512 KiB) holds stripe 1's first byte.
    # At or below one stripe, and with no striping (0): address order.
    cases = [
        (1024 * KIB, 256 * KIB, 512 * KIB),
        (700 * KIB, 256 * KIB, 358_400),
        (512 * KIB, 128 * KIB, 512 * KIB),
        (1024 * KIB, 256 * KIB, 0),
        (8192 * KIB, 2048 * KIB, 4096 * KIB),
        (1024 * KIB, 128 * KIB, 256 * KIB),
    ]
    expected = [[0, 2, 1, 3], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3], [0, 2, 1, 3], [0, 2, 4, 6, 1, 3, 5, 7]]
    assert orders(driver, cases) == expected


@st.composite
def transfers(draw: st.DrawFn) -> tuple[int, int, int]:
    piece = draw(st.integers(1, 64)) * 64
    bytes_ = draw(st.integers(1, 8 * piece))  # at most 8 pieces, as staging queues
    stripe = draw(st.sampled_from([0, bytes_, bytes_ + 7])) if draw(st.booleans()) else draw(st.integers(1, bytes_))
    return bytes_, piece, stripe


@settings(max_examples=300, deadline=None)
@given(st.lists(transfers(), min_size=1, max_size=20))
def test_every_stripe_starts_early_and_pieces_keep_their_order(driver: Path, cases: list[tuple[int, int, int]]) -> None:
    for (bytes_, piece, stripe), order in zip(cases, orders(driver, cases), strict=True):
        pieces = -(-bytes_ // piece)
        assert sorted(order) == list(range(pieces)), (bytes_, piece, stripe, order)
        if stripe == 0 or stripe >= bytes_:
            assert order == list(range(pieces))
            continue
        starts = range(0, bytes_, stripe)
        heads = {start // piece for start in starts}
        position = {p: i for i, p in enumerate(order)}
        assert max(position[h] for h in heads) < len(heads), (bytes_, piece, stripe, order)
        for start in starts:
            # The rest of the stripe's pieces (those holding no stripe's first byte) follow in address order.
            rest = [p for p in order if p not in heads and start <= p * piece < start + stripe]
            assert rest == sorted(rest), (bytes_, piece, stripe, order)
