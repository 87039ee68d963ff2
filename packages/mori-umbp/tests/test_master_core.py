# SPDX-License-Identifier: MIT
"""The master's index projection (seq, gaps, full sync, dedup), routing and LRU policy, driven
directly against the in-memory store, with expected states written out by hand."""

from __future__ import annotations

import time

from mori.umbp.master.core import ADD, REMOVE, Master, MasterTiming
from mori.umbp.master.metrics import MasterMetrics
from mori.umbp.master.policy import select_victims
from mori.umbp.master.store import Candidate, InMemoryMetadataStore, NodeInfo
from mori.umbp.peer.events import EventLog

DRAM, HBM, SSD = 2, 1, 3


def new_master(ttl: float = 10.0) -> Master:
    return Master(InMemoryMetadataStore(), MasterTiming(heartbeat_ttl_s=ttl), MasterMetrics())


def register(m: Master, node: str, free: int = 1000) -> None:
    m.register(NodeInfo(node, "127.0.0.1", f"{node}:1", b"", capacities={DRAM: (1000, free)}))


def keys_on(m: Master, node: str) -> set[str]:
    return {c.key for c in m.store.candidates(node, DRAM)}


def test_bundles_apply_in_order_and_resends_are_idempotent():
    m = new_master()
    register(m, "a")
    r = m.heartbeat("a", [(1, [(ADD, "k1", DRAM, 10)]), (2, [(ADD, "k2", DRAM, 20)])], False, 0, {})
    assert (r.known, r.acked_seq, r.request_full_sync) == (True, 2, False)
    # The response was lost: the peer resends 1-2 with 3; only 3 applies.
    r = m.heartbeat(
        "a", [(1, [(ADD, "k1", DRAM, 10)]), (2, [(ADD, "k2", DRAM, 20)]), (3, [(REMOVE, "k1", DRAM, 10)])], False, 0, {}
    )
    assert r.acked_seq == 3
    assert keys_on(m, "a") == {"k2"}
    assert m.lookup(["k1", "k2"]) == [False, True]


def test_a_probe_finds_a_key_held_by_a_live_node_only():
    """held_by, the probe behind BatchLookup: with every holder live it answers by membership
    alone, else it looks at each key's holders; both are what the holders' lookup says."""
    store = InMemoryMetadataStore()
    store.apply_events("a", 1, [("k1", DRAM, 10), ("both", DRAM, 10), ("k1", SSD, 10)], [], 0.0)
    store.apply_events("b", 1, [("k2", DRAM, 10), ("both", HBM, 10)], [], 0.0)
    keys = ["k1", "k2", "both", "none", "k1"]
    for nodes in ({"a", "b"}, {"a", "b", "c"}, {"a"}, {"b"}, set()):
        expected = [any(loc.node_id in nodes for loc in locs) for locs in store.lookup(keys)]
        assert store.held_by(keys, nodes) == expected
    assert store.held_by(keys, {"a"}) == [True, False, True, False, True]
    store.apply_events("b", 2, [], [("k2", DRAM), ("both", HBM)], 0.0)  # b holds nothing now
    assert store.held_by(keys, {"a"}) == [True, False, True, False, True]


def test_events_of_one_bundle_apply_in_order():
    # An SSD eviction and a re-spill of the same key can share a bundle: the last event wins.
    m = new_master()
    register(m, "a")
    events = [(ADD, "k", SSD, 10), (REMOVE, "k", SSD, 10), (ADD, "k", SSD, 10), (ADD, "j", DRAM, 5)]
    events += [(REMOVE, "j", DRAM, 5)]
    assert m.heartbeat("a", [(1, events)], False, 0, {}).acked_seq == 1
    assert [(loc.node_id, loc.tier) for loc in m.store.lookup(["k"])[0]] == [("a", SSD)]
    assert m.store.lookup(["j"]) == [[]]


def test_a_seq_gap_asks_for_a_full_sync_that_heals():
    m = new_master()
    register(m, "a")
    m.heartbeat("a", [(1, [(ADD, "k1", DRAM, 10)])], False, 0, {})
    r = m.heartbeat("a", [(3, [(ADD, "k3", DRAM, 10)])], False, 0, {})  # bundle 2 was lost
    assert (r.acked_seq, r.request_full_sync) == (1, True)
    assert keys_on(m, "a") == {"k1"}  # nothing after the gap applied
    assert m.metrics.seq_gap._value.get() == 1
    r = m.heartbeat("a", [(3, [(ADD, "k2", DRAM, 10), (ADD, "k3", DRAM, 10)])], True, 3, {})
    assert (r.acked_seq, r.request_full_sync) == (3, False)
    assert keys_on(m, "a") == {"k2", "k3"}  # the snapshot replaced k1
    assert m.heartbeat("a", [(4, [(ADD, "k4", DRAM, 1)])], False, 0, {}).acked_seq == 4


def test_unknown_node_is_expired_and_reaper_wipes_silent_nodes():
    m = new_master(ttl=0.05)
    assert m.heartbeat("ghost", [], False, 0, {}).known is False
    register(m, "a")
    m.heartbeat("a", [(1, [(ADD, "k", DRAM, 5)])], False, 0, {})
    time.sleep(0.2)  # > ttl x max_missed (0.15 s)
    assert m.reap() == ["a"]
    assert m.lookup(["k"]) == [False]
    assert m.heartbeat("a", [], False, 0, {}).known is False


def test_route_put_dedups_and_spreads_by_free_bytes():
    m = new_master()
    register(m, "a", free=300)
    register(m, "b", free=250)
    m.heartbeat("a", [(1, [(ADD, "old", DRAM, 10)])], False, 0, {})
    routes = m.route_put(["old", "n1", "n2", "n1", "huge"], [10, 100, 100, 100, 5000], set())
    assert [r.outcome for r in routes] == ["ALREADY_EXISTS", "ROUTED", "ROUTED", "ALREADY_EXISTS", "UNAVAILABLE"]
    # most_available with in-batch deduction: a (300) then b (250 > 200 left on a).
    assert [r.node.node_id for r in routes[1:3]] == ["a", "b"]
    assert m.route_put(["n3"], [10], {"a", "b"})[0].outcome == "UNAVAILABLE"


def test_route_get_prefers_the_fastest_tier_and_leases():
    m = new_master()
    register(m, "a")
    register(m, "b")
    m.heartbeat("a", [(1, [(ADD, "k", DRAM, 8)])], False, 0, {})
    m.heartbeat("b", [(1, [(ADD, "k", HBM, 8)])], False, 0, {})
    for _ in range(5):
        loc, node = m.route_get(["k"], set())[0]
        assert (loc.tier, node.node_id) == (HBM, "b")
    loc, node = m.route_get(["k"], {"b"})[0]
    assert node.node_id == "a"
    (cand,) = m.store.candidates("a", DRAM)
    assert cand.lease_until > time.time()  # the routed read holds a lease
    assert m.route_get(["nope"], set()) == [None]


def test_lru_victims_to_the_low_watermark_skip_leased():
    cands = [Candidate(f"k{i}", 10, float(i), 0.0) for i in range(10)]
    cands[1] = Candidate("k1", 10, 1.0, lease_until=100.0)  # leased: never a victim
    assert select_victims(cands, total=100, used=90, high=0.9, low=0.7, now=50.0) == []  # not above high
    victims = select_victims(cands, total=100, used=100, high=0.9, low=0.7, now=50.0)
    assert [v.key for v in victims] == ["k0", "k2", "k3"]  # 30 bytes: 100 -> 70


def test_event_log_resends_until_acked_and_full_sync_resets():
    log = EventLog()
    log.add(ADD, "a", DRAM, 1)
    assert [s for s, _ in log.bundles()] == [1]
    log.add(ADD, "b", DRAM, 1)
    assert [s for s, _ in log.bundles()] == [1, 2]
    log.ack(1)
    assert [s for s, _ in log.bundles()] == [2]
    baseline, _ = log.full_sync(lambda: [(ADD, "a", DRAM, 1), (ADD, "b", DRAM, 1)])
    assert baseline == 2 and log.bundles() == []
    log.add(REMOVE, "a", DRAM, 1)
    assert [s for s, _ in log.bundles()] == [3]


def test_capacity_gauges_follow_a_node_that_leaves_and_comes_back():
    # The metrics keep their labelled children (MasterMetrics.child): one of a node that left
    # must not be kept, or the node's gauges would stop being exported when it comes back.
    from prometheus_client import generate_latest

    m = new_master()
    register(m, "a", free=600)
    line = b'mori_umbp_client_capacity_available_bytes{node="a",tier="DRAM"}'
    assert line + b" 600.0" in generate_latest(m.metrics.registry)
    m.unregister("a")
    assert line not in generate_latest(m.metrics.registry)
    register(m, "a", free=700)
    assert line + b" 700.0" in generate_latest(m.metrics.registry)
    m.heartbeat("a", [], False, 0, {DRAM: (1000, 650)})
    assert line + b" 650.0" in generate_latest(m.metrics.registry)
