# SPDX-License-Identifier: MIT
"""NOTE [coalesced puts]: the device proxy's merging of a batch of puts (src/remote/put_batch.cpp),
compiled alone with a small driver. Whatever it merges, carrying out its transfers must leave every
target byte as carrying out the pieces one by one in ticket order does (simulated here on byte
arrays), and contiguous slices posted in any order must become one transfer."""

from __future__ import annotations

import random
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from native_driver import build_native_driver

Piece = tuple[int, int, int, int]  # pe, offset, local, bytes
SPAN = 256  # target and source addresses stay below this in the random cases


@pytest.fixture(scope="module")
def coalesce(tmp_path_factory: pytest.TempPathFactory):
    exe = build_native_driver(tmp_path_factory.mktemp("put_batch"), "coalesce_puts", "remote/put_batch.cpp")

    def run(pieces: list[Piece], max_bytes: int = 1 << 40) -> list[Piece]:
        text = "\n".join([str(max_bytes), *(" ".join(map(str, p)) for p in pieces)]) + "\n"
        done = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True, timeout=30)
        return [tuple(int(v) for v in line.split()) for line in done.stdout.splitlines()]  # type: ignore[misc]

    return run


def _apply(transfers: list[Piece]) -> dict[int, list[int]]:
    """Each PE's target bytes after the transfers, in order; byte at source address a is a's id."""
    targets: dict[int, list[int]] = {}
    for pe, offset, local, nbytes in transfers:
        if nbytes == 0:  # lands nothing
            continue
        target = targets.setdefault(pe, [-1] * (2 * SPAN))
        target[offset : offset + nbytes] = range(local, local + nbytes)
    return targets


def test_shuffled_slices_of_one_buffer_become_one_transfer(coalesce) -> None:
    slices = [(1, 1000 + i * 64, 50_000 + i * 64, 64) for i in range(32)]
    random.Random(3).shuffle(slices)
    assert coalesce(slices) == [(1, 1000, 50_000, 32 * 64)]


def test_merging_stops_at_the_limit_at_a_gap_and_between_pes(coalesce) -> None:
    pieces = [(0, 0, 0, 64), (0, 64, 64, 64), (0, 128, 128, 64), (0, 256, 256, 64), (2, 192, 192, 64),
              (0, 320, 999, 64)]  # fmt: skip
    assert coalesce(pieces, max_bytes=128) == [(0, 0, 0, 128), (0, 128, 128, 64), (0, 256, 256, 64),
                                               (0, 320, 999, 64), (2, 192, 192, 64)]  # fmt: skip


def test_overlapping_pieces_keep_their_ticket_order(coalesce) -> None:
    pieces = [(0, 100, 0, 50), (0, 0, 500, 64), (0, 120, 900, 8)]
    assert coalesce(pieces) == pieces


pieces_strategy = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, SPAN - 1), st.integers(0, SPAN - 1), st.integers(0, 48)),
    max_size=24,
)


@settings(max_examples=150, deadline=None)
@given(pieces=pieces_strategy, contiguous=st.booleans(), max_bytes=st.sampled_from([16, 64, 1 << 40]))
def test_transfers_land_what_the_pieces_land_in_order(coalesce, pieces, contiguous, max_bytes) -> None:
    if contiguous:  # slices of one source buffer, in a shuffled ticket order: the case that merges
        pieces = [(pe, offset, offset + 7, nbytes) for pe, offset, _, nbytes in pieces]
    transfers = coalesce(pieces, max_bytes)
    assert _apply(transfers) == _apply(pieces)
    assert len(transfers) <= len(pieces)
    assert all(t in pieces or t[3] <= max_bytes for t in transfers)  # only merged transfers are new
