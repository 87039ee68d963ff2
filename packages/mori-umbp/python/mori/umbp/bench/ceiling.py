# SPDX-License-Identifier: MIT
"""The hit rate a trace could reach: the configured eviction policy simulated exactly on a pool of
the same capacity, and Belady's OPT (the best any policy could do).

Both replay the trace as ``runner.replay`` does: a request's hits are the leading run of its
blocks present in the pool (``batch_exists_consecutive``); the hits are read, then the missing
blocks of the rest are put (blocks of the rest already present are left alone, as a put of an
existing key is).

``policy_hits`` models a pool of ``capacity`` blocks (each peer's blocks at its high watermark,
summed: NOTE [eviction on demand] in ``mori.umbp.peer.store``) ordered by the peers' own
``EvictionOrder`` with the configured policy, and the peers' chain order (NOTE [chain order]):
a batch's keys are resolved and committed last to first, so the head ends most recent. A victim
is never a block of the request being served (in the pool those hold read leases or are
unacknowledged commits). Read leases of earlier requests depend on wall time: without
``lease_s`` they are left out (the policy alone), with it the replay's timing puts them back.
Not modelled: the split over peers (each evicts among its own blocks).

``opt_hits`` is Belady's rule over the flattened block accesses with bypass (a block whose next
use is later than every cached block's is not cached): it maximises raw hits, and on a chain trace
(every request holding a block holds all of that block's prefix before it, as prompts hashed
into a radix tree do) it keeps each chain cached from its head, so its raw hits are prefix hits
and no policy can have more.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TypeVar

from mori.umbp.errors import InvalidArgumentError
from mori.umbp.peer.lru import EvictionOrder

_NEVER = float("inf")
_T = TypeVar("_T")


def capacity_blocks(peers: int, peer_capacity: int, block_bytes: int, high_watermark: float) -> int:
    """Blocks a pool holds with every peer at its high watermark: per peer, whole pages (the page
    is the block, at most 2 MiB) that fit under ``high_watermark`` of its capacity."""
    page = min(block_bytes, 2 << 20)
    pages_per_block = -(-block_bytes // page)
    per_peer = int(peer_capacity * high_watermark) // page // pages_per_block
    return peers * per_peer


def _check(capacity: int) -> None:
    if capacity < 0:
        raise InvalidArgumentError(f"capacity={capacity} blocks must be >= 0")


class _Busy:
    """Blocks no victim may be: the request's own, and those under a read lease at ``now``."""

    def __init__(self, keys: Sequence[str], leases: dict[str, float], now: float) -> None:
        self.keys, self.leases, self.now = set(keys), leases, now

    def __contains__(self, key: object) -> bool:
        return key in self.keys or self.leases.get(key, -1.0) > self.now  # type: ignore[call-overload]


def policy_hits(
    requests: Sequence[Sequence[str]],
    capacity: int,
    policy: str = "lru",
    window: int = 16,
    lease_s: float = 0.0,
    starts_s: Sequence[float] = (),
    chunk: int = 0,
) -> list[int]:
    """Per request, the prefix hits of a pool of ``capacity`` blocks evicting by ``policy``. With
    ``lease_s`` and each request's start time (``starts_s``, seconds), a block read by a request
    cannot be evicted for ``lease_s`` after that request started (the peers' read lease,
    UMBP_DRAM_READ_LEASE_MS), so the replay's own timing can be put back in. With ``chunk``, the
    chain order holds within each ``chunk`` keys only, chunks head first (a client that sends a
    batch to a peer in RPCs of ``chunk`` keys, each served last to first, one after another)."""
    _check(capacity)
    if lease_s and len(starts_s) != len(requests):
        raise InvalidArgumentError(f"starts_s has {len(starts_s)} times for {len(requests)} requests")
    order = EvictionOrder(policy, window)
    leases: dict[str, float] = {}
    hits = []
    for n, keys in enumerate(requests):
        h = 0
        while h < len(keys) and keys[h] in order:
            h += 1
        hits.append(h)
        now = starts_s[n] if lease_s else 0.0
        for key in _chain_order(keys[:h], chunk):  # the batch get resolves last to first
            order.touch(key)
            if lease_s:
                leases[key] = now + lease_s
        protected = _Busy(keys, leases, now)
        for depth in _chain_order(range(h, len(keys)), chunk):  # the batch put commits last to first
            key = keys[depth]
            if key in order:
                continue
            while len(order) >= capacity:
                victim = order.victim(protected)
                if victim is None:
                    break
                order.remove(victim)
            if len(order) < capacity:
                order.add(key, depth)
    return hits


def _chain_order(items: Sequence[_T], chunk: int) -> list[_T]:
    """``items`` last to first, or with ``chunk`` last to first within each chunk, chunks in order."""
    if chunk <= 0:
        return list(reversed(items))
    return [x for i in range(0, len(items), chunk) for x in reversed(items[i : i + chunk])]


def opt_hits(requests: Sequence[Sequence[str]], capacity: int) -> list[int]:
    """Per request, the prefix hits of Belady's OPT (with bypass) on a pool of ``capacity`` blocks."""
    _check(capacity)
    flat = [key for keys in requests for key in keys]
    next_use: list[float] = [_NEVER] * len(flat)
    seen: dict[str, int] = {}
    for t in range(len(flat) - 1, -1, -1):
        next_use[t] = seen.get(flat[t], _NEVER)
        seen[flat[t]] = t
    cached: dict[str, float] = {}  # key -> its next use
    heap: list[tuple[float, str]] = []  # (-next use, key); stale entries skipped
    hits = []
    t = 0
    for keys in requests:
        h = 0
        while h < len(keys) and keys[h] in cached:
            h += 1
        hits.append(h)
        for key in keys:
            nxt = next_use[t]
            t += 1
            if key in cached:
                cached[key] = nxt
                heapq.heappush(heap, (-nxt, key))
                continue
            if nxt == _NEVER or capacity == 0:
                continue
            if len(cached) >= capacity:
                while -heap[0][0] != cached.get(heap[0][1]):
                    heapq.heappop(heap)
                if -heap[0][0] <= nxt:
                    continue  # bypass: every cached block is needed sooner
                del cached[heapq.heappop(heap)[1]]
            cached[key] = nxt
            heapq.heappush(heap, (-nxt, key))
    return hits
