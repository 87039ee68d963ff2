# SPDX-License-Identifier: MIT
"""Two engines in one process moving CPU memory; every result is compared with numpy."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import multi_pair_batch_round_trip, new_engine, random_bytes, register, run_threads
from hypothesis import given
from hypothesis import strategies as st

from mori.io import IOEngine, MemoryDesc, StatusCode

MiB = 1 << 20


def wait_ok(status, timeout_ms: int = 20000) -> None:
    assert status.WaitFor(timeout_ms) == StatusCode.SUCCESS, status.Message()
    assert status.Succeeded() and not status.Failed() and not status.InProgress()


def test_write_then_read_round_trip(pair):
    a, b = pair
    src, dst, back = random_bytes(MiB, 1), np.zeros(MiB, np.uint8), np.zeros(MiB, np.uint8)
    m_src, m_dst, m_back = register(a, src), register(b, dst), register(a, back)
    remote = MemoryDesc.unpack(m_dst.pack())  # as a peer would get it
    wait_ok(a.write(m_src, 0, remote, 0, MiB, a.allocate_transfer_uid()))
    np.testing.assert_array_equal(dst, src)
    wait_ok(a.read(m_back, 10, remote, 20, 5000, a.allocate_transfer_uid()))
    np.testing.assert_array_equal(back[10:5010], src[20:5020])
    assert not back[:10].any() and not back[5010:].any()


def test_frame_planning_against_a_reference(pair):
    """Stripes and segment limits cut transfers into frames; every byte still lands once."""
    a, b = pair
    n = 3 * MiB + 7
    src, dst = random_bytes(n, 12), np.zeros(n + 5, np.uint8)
    m_src, m_dst = register(a, src), register(b, dst)
    # One contiguous run given as many adjacent descriptors merges back into one run.
    sizes = [1000] * (n // 1000) + [n % 1000]
    offsets = np.cumsum([0, *sizes[:-1]]).tolist()
    wait_ok(a.create_session(m_src, m_dst).batch_write(offsets, [o + 5 for o in offsets], sizes, 1))
    assert np.array_equal(dst[5:], src) and not dst[:5].any()


def test_large_transfer_is_striped_and_exact(pair):
    a, b = pair
    n = 48 * MiB + 12345  # several chunks per lane, and a ragged tail
    src, dst = random_bytes(n, 2), np.zeros(n, np.uint8)
    m_src, m_dst = register(a, src), register(b, dst)
    wait_ok(a.write(m_src, 0, m_dst, 0, n, 1))
    assert np.array_equal(dst, src)
    src[:] = 0
    wait_ok(a.read(m_src, 0, m_dst, 0, n, 2))
    assert np.array_equal(dst, src)


def test_thousands_of_small_descriptors_in_one_batch(pair):
    a, b = pair
    rng = np.random.default_rng(3)
    count = 4000
    sizes = rng.integers(4096, 64 * 1024, size=count, dtype=np.uint64)
    slot = 64 * 1024
    local_offsets = np.arange(count, dtype=np.uint64) * slot
    remote_offsets = rng.permutation(count).astype(np.uint64) * slot  # scattered on the target
    src, dst = random_bytes(count * slot, 4), np.zeros(count * slot, np.uint8)
    m_src, m_dst = register(a, src), register(b, dst)
    session = a.create_session(m_src, m_dst)
    wait_ok(session.batch_write(local_offsets, remote_offsets, sizes, 9))
    expected = np.zeros_like(dst)
    for lo, ro, s in zip(local_offsets.tolist(), remote_offsets.tolist(), sizes.tolist(), strict=True):
        expected[ro : ro + s] = src[lo : lo + s]
    assert np.array_equal(dst, expected)
    # The target saw the whole batch as one inbound transfer of uid 9.
    inbound = b.pop_inbound_transfer_status("initiator", 9)
    assert inbound is not None and inbound.Code() == StatusCode.SUCCESS
    assert b.pop_inbound_transfer_status("initiator", 9) is None  # popped


def test_multi_pair_batch_gives_one_status_per_pair(pair):
    multi_pair_batch_round_trip(*pair, seed=10)


def test_inbound_status_for_reads_and_writes(pair):
    a, b = pair
    buf_a, buf_b = random_bytes(4096, 5), np.zeros(4096, np.uint8)
    ma, mb = register(a, buf_a), register(b, buf_b)
    assert b.pop_inbound_transfer_status("initiator", 77) is None
    wait_ok(a.write(ma, 0, mb, 0, 4096, 77))
    wait_ok(a.read(ma, 0, mb, 0, 100, 78))
    assert b.pop_inbound_transfer_status("initiator", 77).Succeeded()
    assert b.pop_inbound_transfer_status("initiator", 78).Succeeded()
    assert b.pop_inbound_transfer_status("somebody-else", 78) is None


def test_empty_batch_succeeds_and_is_notified(pair):
    a, b = pair
    ma, mb = register(a, np.zeros(16, np.uint8)), register(b, np.zeros(16, np.uint8))
    session = a.create_session(ma, mb)
    wait_ok(session.batch_write([], [], [], 5))
    assert b.pop_inbound_transfer_status("initiator", 5).Succeeded()


def test_engine_can_target_itself():
    e = new_engine("self")
    try:
        e.register_remote_engine(e.get_engine_desc())
        src, dst = random_bytes(1000, 6), np.zeros(1000, np.uint8)
        wait_ok(e.write(register(e, src), 0, register(e, dst), 0, 1000, 1))
        assert np.array_equal(src, dst)
    finally:
        e.shutdown()


def test_concurrent_initiators_in_both_directions(pair):
    a, b = pair
    n = 4 * MiB
    a_src, b_src = random_bytes(n, 7), random_bytes(n, 8)
    a_dst, b_dst = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    ma_src, ma_dst, mb_src, mb_dst = register(a, a_src), register(a, a_dst), register(b, b_src), register(b, b_dst)
    results: list[StatusCode] = []

    def pump(engine, local, remote):
        statuses = [engine.write(local, i * MiB, remote, i * MiB, MiB, i) for i in range(4)]
        results.append(IOEngine.wait_all(statuses, 20000))

    directions = [(a, ma_src, mb_dst), (b, mb_src, ma_dst)]
    run_threads(lambda i: pump(*directions[i]), len(directions), 30)
    assert results == [StatusCode.SUCCESS, StatusCode.SUCCESS]
    assert np.array_equal(b_dst, a_src) and np.array_equal(a_dst, b_src)


SLOT = 16 * 1024
SLOTS = 64


@st.composite
def batches(draw):
    """Non-overlapping destination slices (so the result is well defined), arbitrary sources."""
    count = draw(st.integers(0, 40))
    dst_slots = draw(st.permutations(range(SLOTS)))[:count]
    items = []
    for slot in dst_slots:
        size = draw(st.integers(0, SLOT))
        dst_off = slot * SLOT + draw(st.integers(0, SLOT - size))
        src_off = draw(st.integers(0, SLOTS * SLOT - size))
        items.append((src_off, dst_off, size))
    return items


@pytest.fixture(scope="module")
def module_pair():
    # Tiny stripes and at most 7 segments per frame, so random batches cross every frame split.
    os.environ["MORI_IO_MAX_SEGMENTS"] = "7"
    try:
        a = new_engine("hyp-initiator", lanes=3, striping_threshold_bytes=4096, min_stripe_bytes=4096)
        b = new_engine("hyp-target", lanes=2)
    finally:
        del os.environ["MORI_IO_MAX_SEGMENTS"]
    a.register_remote_engine(b.get_engine_desc())
    bufs = {
        "a_src": random_bytes(SLOTS * SLOT, 20),
        "a_dst": np.zeros(SLOTS * SLOT, np.uint8),
        "b": random_bytes(SLOTS * SLOT, 21),
    }
    mems = {"a_src": register(a, bufs["a_src"]), "a_dst": register(a, bufs["a_dst"]), "b": register(b, bufs["b"])}
    yield a, b, bufs, mems
    a.shutdown()
    b.shutdown()


@given(items=batches(), as_numpy=st.booleans())
def test_random_batch_writes_match_numpy(module_pair, items, as_numpy):
    a, _, bufs, mems = module_pair
    expected = bufs["b"].copy()
    for src_off, dst_off, size in items:
        expected[dst_off : dst_off + size] = bufs["a_src"][src_off : src_off + size]
    lo, ro, sz = ([it[i] for it in items] for i in range(3))
    if as_numpy:
        lo, ro, sz = (np.asarray(x, dtype=np.uint64) for x in (lo, ro, sz))
    session = a.create_session(mems["a_src"], mems["b"])
    wait_ok(session.batch_write(lo, ro, sz, a.allocate_transfer_uid()))
    assert np.array_equal(bufs["b"], expected)


@given(items=batches())
def test_random_batch_reads_match_numpy(module_pair, items):
    a, _, bufs, mems = module_pair
    expected = bufs["a_dst"].copy()
    for remote_off, local_off, size in items:  # reads scatter into non-overlapping local slices
        expected[local_off : local_off + size] = bufs["b"][remote_off : remote_off + size]
    session = a.create_session(mems["a_dst"], mems["b"])
    lo = [it[1] for it in items]
    ro = [it[0] for it in items]
    wait_ok(session.batch_read(lo, ro, [it[2] for it in items], a.allocate_transfer_uid()))
    assert np.array_equal(bufs["a_dst"], expected)


def test_inbound_records_are_bounded_per_initiator(monkeypatch):
    monkeypatch.setenv("MORI_IO_MAX_INBOUND_STATUS", "3")
    a, b = new_engine("bounded-a"), new_engine("bounded-b")
    try:
        a.register_remote_engine(b.get_engine_desc())
        ma, mb = register(a, random_bytes(64, 13)), register(b, np.zeros(64, np.uint8))
        for uid in range(5):
            wait_ok(a.write(ma, 0, mb, 0, 64, uid))
        assert [b.pop_inbound_transfer_status("bounded-a", uid) is None for uid in range(5)] == [
            True, True, False, False, False,
        ]  # fmt: skip
    finally:
        a.shutdown()
        b.shutdown()
