# SPDX-License-Identifier: MIT
"""Put routing with HBM and DRAM tiers (MORI's ConfigurableRoutePutStrategy): tier first, then
the algorithm, with node affinity, and in-batch deduction of free bytes. Checked against an
independent model that ranks every (node, tier) by one sort key per affinity, on random
clusters; and through the master, whose dedup comes first."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from test_master_core import new_master

from mori.umbp import ConfigError, MasterServer
from mori.umbp.master.policy import route_put_batch
from mori.umbp.master.store import NodeInfo

HBM, DRAM, SSD = 1, 2, 3
RANK = {HBM: 0, DRAM: 1}  # SSD is never a put target


def model(sizes, free, affinity="none", requester=""):
    """Per size, the first (node, tier) in a lexicographic order that fits; ``free`` is charged."""
    free = dict(free)
    out = []
    total = sum(s for s in sizes if s is not None)

    def first(size, order):
        fits = [(n, t) for (n, t), a in free.items() if t in RANK and a >= size]
        return min(fits, key=order) if fits else None

    def plain(nt):
        return (RANK[nt[1]], -free[nt], nt[0])

    pin = first(total, plain) if affinity == "same" and total else None
    anchor = pin[0] if pin else None
    for size in sizes:
        if size is None:
            out.append(None)
            continue
        if affinity == "local":
            pick = first(size, lambda nt: (nt[0] != requester, *plain(nt)))
        elif affinity == "same":
            pick = (pin if pin and free[pin] >= size else None) or first(
                size, lambda nt, a=anchor: (RANK[nt[1]], nt[0] != a, -free[nt], nt[0])
            )
            if pick != pin or pin is None:
                pin = None
                anchor = pick[0] if pick else anchor
        else:
            pick = first(size, plain)
        if pick:
            free[pick] -= size
        out.append(pick)
    return out


def random_cluster(rng: random.Random) -> dict[tuple[str, int], int]:
    free = {}
    for n in range(rng.randint(1, 5)):
        for tier in (HBM, DRAM, SSD):
            if rng.random() < 0.7:
                free[(f"n{n}", tier)] = rng.choice([0, 10, 30, 60, 100, 250])
    return free


@pytest.mark.parametrize("affinity", ["none", "local", "same"])
def test_most_available_matches_the_model(affinity):
    rng = random.Random(affinity)
    for trial in range(400):
        free = random_cluster(rng)
        sizes = [None if rng.random() < 0.15 else rng.choice([5, 10, 40, 90]) for _ in range(rng.randint(1, 8))]
        requester = f"n{rng.randint(0, 5)}"
        want = model(sizes, free, affinity, requester)
        got = route_put_batch(sizes, dict(free), "most_available", affinity, requester)
        assert got == want, (trial, free, sizes, requester)


def test_hbm_comes_first_then_dram_and_ssd_never():
    free = {("a", DRAM): 100, ("b", HBM): 20, ("c", SSD): 1000}
    assert route_put_batch([10, 10, 10, 10], free) == [("b", HBM), ("b", HBM), ("a", DRAM), ("a", DRAM)]
    assert free == {("a", DRAM): 80, ("b", HBM): 0, ("c", SSD): 1000}
    assert route_put_batch([500], free) == [None]  # SSD has room, but a put never targets it


def test_affinity_keeps_a_batch_together_or_local():
    free = {("a", HBM): 100, ("b", HBM): 90, ("b", DRAM): 500}
    # none: most available each time, so the batch alternates between a and b.
    assert [n for n, _ in route_put_batch([30, 30, 30], dict(free))] == ["a", "b", "a"]
    # same: 90 bytes fit a's HBM whole, so all three stay there.
    assert route_put_batch([30, 30, 30], dict(free), affinity="same") == [("a", HBM)] * 3
    # local: the requester's own HBM, then its own DRAM, before a's HBM.
    got = route_put_batch([60, 60], dict(free), affinity="local", requester="b")
    assert got == [("b", HBM), ("b", DRAM)]


def test_random_is_weighted_by_free_bytes_within_the_first_tier():
    rng = random.Random(7)
    counts = Counter()
    for _ in range(3000):
        free = {("a", HBM): 300, ("b", HBM): 100, ("c", DRAM): 10_000}
        ((node, tier),) = route_put_batch([1], free, "random", rng=rng)
        assert tier == HBM
        counts[node] += 1
    assert counts["a"] / 3000 == pytest.approx(0.75, abs=0.03)


def test_master_dedups_then_routes_hbm_first():
    m = new_master()
    for node, caps in (("a", {DRAM: (1000, 1000)}), ("g", {HBM: (100, 100), DRAM: (1000, 1000)})):
        m.register(NodeInfo(node, "127.0.0.1", f"{node}:1", b"", capacities=caps))
    m.heartbeat("a", [(1, [(0, "old", DRAM, 10)])], False, 0, {})
    routes = m.route_put(["old", "h1", "h2", "h1", "d1"], [10, 60, 40, 60, 10], set())
    got = [(r.outcome, r.node.node_id if r.node else None, r.tier) for r in routes]
    assert got == [
        ("ALREADY_EXISTS", None, 0),
        ("ROUTED", "g", HBM),
        ("ROUTED", "g", HBM),
        ("ALREADY_EXISTS", None, 0),
        ("ROUTED", "a", DRAM),  # g's HBM is spent (projected); a DRAM tie goes to the smaller id
    ]
    assert m.metrics.cap_total.labels("g", "HBM")._value.get() == 100  # exported per tier, HBM too
    local = new_master()
    local.put_affinity = "local"
    for node in ("a", "g"):
        local.register(NodeInfo(node, "127.0.0.1", f"{node}:1", b"", capacities={DRAM: (1000, 1000)}))
    assert {r.node.node_id for r in local.route_put(["x", "y"], [10, 10], set(), requester="g")} == {"g"}


def test_bad_strategy_names_are_config_errors(monkeypatch):
    from conftest import master_config

    with pytest.raises(ConfigError, match=r"put_algo='fastest' is not one of most_available, random"):
        MasterServer(master_config(put_algo="fastest"))
    with pytest.raises(ConfigError, match=r"put_affinity='near' is not one of none, same, local"):
        MasterServer(master_config(put_affinity="near"))
    monkeypatch.setenv("UMBP_ROUTE_PUT_NODE_AFFINITY", "SAME")
    assert master_config().put_affinity == "same"
    monkeypatch.setenv("UMBP_ROUTE_PUT_SELECT_ALGO", "fastest")
    with pytest.raises(ConfigError, match="UMBP_ROUTE_PUT_SELECT_ALGO='fastest' does not parse as choice"):
        master_config()
