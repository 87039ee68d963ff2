# SPDX-License-Identifier: MIT
"""The trace's ceilings (mori.umbp.bench.ceiling) against brute-force references on tiny traces:
the policies against a naive list kept in recency order, Belady's OPT against an exhaustive search
over every eviction (and bypass) choice."""

from __future__ import annotations

import functools
import itertools
import random

import pytest

from mori.umbp.bench import ceiling, trace
from mori.umbp.errors import InvalidArgumentError

POLICIES = ["lru", "prefix_aware_lru", "segmented_lru"]


def _naive_policy(requests, capacity, policy, window=16, lease=0.0, starts=(), chunk=0):
    """Lists, least recent first, and a depth per key; the victim is picked by scanning them. Under
    segmented_lru a read key moves to the protected list, whose oldest keys fall back to the newest
    place of the other list past 0.8 of all keys, and victims come from the other list first."""
    order: list[str] = []  # every key, or under segmented_lru those not read since they were put
    protected: list[str] = []
    depth: dict[str, int] = {}
    read_at: dict[str, float] = {}
    hits = []
    for n, keys in enumerate(requests):
        h = 0
        while h < len(keys) and (keys[h] in order or keys[h] in protected):
            h += 1
        hits.append(h)
        for key in _served(keys[:h], chunk):  # resolved last to first
            (protected if key in protected else order).remove(key)
            (protected if policy == "segmented_lru" else order).append(key)
            while len(protected) > int(0.8 * (len(order) + len(protected))):
                order.append(protected.pop(0))
            read_at[key] = starts[n] if lease else 0.0
        for key in _served(keys[h:], chunk):  # committed last to first
            d = keys.index(key)
            if key in order or key in protected:
                continue
            while len(order) + len(protected) >= capacity:
                free = [
                    k
                    for k in order + protected
                    if k not in keys and not (lease and starts[n] < read_at.get(k, -1e9) + lease)
                ]
                if not free:
                    break
                if policy != "prefix_aware_lru":
                    victim = free[0]
                else:
                    seen = free[:window]
                    deepest = max(depth[k] for k in seen)
                    victim = next(k for k in seen if depth[k] == deepest)
                (protected if victim in protected else order).remove(victim)
                del depth[victim]
            if len(order) + len(protected) < capacity:
                order.append(key)
                depth[key] = d
    return hits


def _served(keys, chunk):
    """The order a peer serves ``keys`` in: last to first, per RPC of ``chunk`` keys if chunked."""
    if not chunk:
        return keys[::-1]
    out = []
    for start in range(0, len(keys), chunk):
        out += keys[start : start + chunk][::-1]
    return out


def _exhaustive_opt(requests, capacity):
    """The most prefix hits over every choice: each missing block of a request's rest is either not
    stored or stored in a free place or in place of any stored block."""
    reqs = [tuple(r) for r in requests]

    @functools.cache
    def best(i: int, cache: frozenset) -> int:
        if i == len(reqs):
            return 0
        keys = reqs[i]
        h = 0
        while h < len(keys) and keys[h] in cache:
            h += 1
        missing = [k for k in dict.fromkeys(keys[h:]) if k not in cache]
        return h + place(i, missing, cache)

    @functools.cache
    def place_cached(i: int, missing: tuple, cache: frozenset) -> int:
        if not missing:
            return best(i + 1, cache)
        key, rest = missing[0], missing[1:]
        options = [place_cached(i, rest, cache)]  # not stored
        if len(cache) < capacity:
            options.append(place_cached(i, rest, cache | {key}))
        else:
            options += [place_cached(i, rest, (cache - {old}) | {key}) for old in cache]
        return max(options)

    def place(i, missing, cache):
        return place_cached(i, tuple(missing), cache)

    return best(0, frozenset())


def _random_chains(rng: random.Random, requests: int, roots: int, longest: int) -> list[list[str]]:
    """Requests that are prefixes of a few chains (a radix tree of ``roots`` paths)."""
    out = []
    for _ in range(requests):
        root = rng.randrange(roots)
        out.append([f"c{root}-{d}" for d in range(rng.randint(1, longest))])
    return out


def _tiny_traces():
    rng = random.Random(7)
    cases = [trace.synthetic(6, 2, 1, seed) for seed in range(4)]
    cases += [trace.synthetic(5, 3, 2, seed) for seed in range(3)]
    cases += [_random_chains(rng, 6, 3, 3) for _ in range(8)]
    return cases


@pytest.mark.parametrize("policy", POLICIES)
def test_policy_simulation_matches_a_naive_list(policy):
    rng = random.Random(11)
    traces = _tiny_traces() + [_random_chains(rng, 40, 5, 6) for _ in range(20)]
    traces.append(trace.synthetic(80, 6, 3, 5))
    for t, window in itertools.product(traces, (1, 2, 16)):
        for capacity in (0, 1, 2, 3, 5, 8, 13):
            want = _naive_policy(t, capacity, policy, window)
            assert ceiling.policy_hits(t, capacity, policy, window) == want, (t, capacity, window)


@pytest.mark.parametrize("policy", POLICIES)
def test_read_leases_match_a_naive_list(policy):
    rng = random.Random(5)
    for _ in range(30):
        t = _random_chains(rng, 40, 5, 6)
        starts = sorted(rng.uniform(0, 4) for _ in t)
        for capacity, lease in itertools.product((2, 4, 7), (0.1, 0.5, 2.0)):
            want = _naive_policy(t, capacity, policy, 16, lease, starts)
            assert ceiling.policy_hits(t, capacity, policy, 16, lease, starts) == want, (t, capacity, lease)
    with pytest.raises(InvalidArgumentError, match=r"starts_s has 1 times for 2 requests"):
        ceiling.policy_hits([["a"], ["b"]], 1, "lru", 16, 0.5, [0.0])


@pytest.mark.parametrize("policy", POLICIES)
def test_chunked_chain_order_matches_a_naive_list(policy):
    rng = random.Random(13)
    traces = [_random_chains(rng, 40, 5, 9) for _ in range(20)] + [trace.synthetic(80, 6, 3, 5)]
    for t, chunk in itertools.product(traces, (1, 2, 3, 32)):
        for capacity in (3, 6, 10):
            want = _naive_policy(t, capacity, policy, 16, chunk=chunk)
            assert ceiling.policy_hits(t, capacity, policy, 16, chunk=chunk) == want, (t, capacity, chunk)
    # Chunks of one key serve a chain head first: LRU keeps the tails, a different outcome.
    assert any(ceiling.policy_hits(t, 6, "lru", chunk=1) != ceiling.policy_hits(t, 6, "lru") for t in traces)


def test_leases_change_the_outcome_somewhere():
    rng = random.Random(9)
    traces = [_random_chains(rng, 40, 5, 6) for _ in range(10)]
    starts = [i * 0.1 for i in range(40)]
    assert any(ceiling.policy_hits(t, 5, "lru") != ceiling.policy_hits(t, 5, "lru", 16, 0.5, starts) for t in traces)


def test_the_policies_differ_somewhere():
    # A check that the reference is not trivially equal for all: each picks differently somewhere.
    rng = random.Random(3)
    traces = [_random_chains(rng, 40, 5, 6) for _ in range(20)]
    for other in ("prefix_aware_lru", "segmented_lru"):
        assert any(_naive_policy(t, 5, "lru") != _naive_policy(t, 5, other) for t in traces), other


def test_opt_matches_an_exhaustive_search():
    for t in _tiny_traces():
        for capacity in (0, 1, 2, 3):
            want = _exhaustive_opt(t, capacity)
            got = ceiling.opt_hits(t, capacity)
            assert sum(got) == want, (t, capacity)


def test_opt_bounds_the_policies_and_the_unlimited_pool_bounds_opt():
    reqs = trace.synthetic(300, 20, 4, 1)
    unlimited = sum(trace.expected_hits(reqs))
    for capacity in (8, 40, 200):
        opt = sum(ceiling.opt_hits(reqs, capacity))
        for policy in POLICIES:
            assert sum(ceiling.policy_hits(reqs, capacity, policy)) <= opt <= unlimited
    big = len({k for r in reqs for k in r})
    assert ceiling.opt_hits(reqs, big) == trace.expected_hits(reqs)
    assert ceiling.policy_hits(reqs, big, "lru") == trace.expected_hits(reqs)


def test_capacity_in_blocks_and_bad_capacity():
    # Two 48 MiB peers at a 0.9 watermark, 64 KiB blocks: 691 pages each (768 x 0.9, rounded down).
    assert ceiling.capacity_blocks(2, 48 << 20, 64 << 10, 0.9) == 1382
    # 4 MiB blocks take two 2 MiB pages: 1 GiB x 0.9 holds 460 pages, 230 blocks.
    assert ceiling.capacity_blocks(1, 1 << 30, 4 << 20, 0.9) == 115 * 2
    with pytest.raises(InvalidArgumentError, match=r"capacity=-1 blocks must be >= 0"):
        ceiling.policy_hits([["a"]], -1)
    with pytest.raises(InvalidArgumentError, match=r"capacity=-1 blocks must be >= 0"):
        ceiling.opt_hits([["a"]], -1)
