# SPDX-License-Identifier: MIT
"""NOTE [running leases] in mori.umbp.peer.leases: the set of running read leases, kept as they end,
is the set a plain dict of lease ends gives at every moment, whatever the grants, extensions,
drops and clock steps; and the eviction scan that skips it picks the same victims."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mori.umbp.peer.leases import ReadLeases
from mori.umbp.peer.lru import EvictionOrder

LENGTH = 0.5
KEYS = [f"k{i}" for i in range(6)]
steps = st.lists(
    st.tuples(st.sampled_from(["grant", "drop", "tick"]), st.sampled_from(KEYS), st.floats(0.0, 0.4)), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_running_leases_match_a_dict_of_lease_ends(ops):
    leases, ends, now = ReadLeases(), {}, 0.0
    for op, key, dt in ops:
        if op == "grant":
            leases.grant(key, now, LENGTH)
            ends[key] = now + LENGTH
        elif op == "drop":
            assert (leases.drop(key) > now) == (ends.pop(key, 0.0) > now)
        else:
            now += dt
        assert leases.running(now) == {k for k, end in ends.items() if end > now}
        for k in KEYS:
            assert (leases.end(k) > now) == (ends.get(k, 0.0) > now)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["lru", "prefix_aware_lru", "segmented_lru"]),
    st.lists(st.integers(0, 19), max_size=40),
    st.sets(st.integers(0, 19)),
)
def test_victims_skipping_a_set_are_what_victim_names(policy, touches, busy_ids):
    order = EvictionOrder(policy, window=4)
    for i in range(20):
        order.add(f"b{i}", i % 7)
    for i in touches:
        order.touch(f"b{i}")
    busy = {f"b{i}" for i in busy_ids}
    expected, skip = [], set(busy)
    while (key := order.victim(skip)) is not None:
        expected.append(key)
        skip.add(key)
    assert list(order.victims(busy)) == expected
