# SPDX-License-Identifier: MIT
"""The master's external-KV index and hit counters (MORI's external KV semantics).

External blocks are KV pages UMBP does not own (SGLang's own HBM/DRAM/L3 caches): nodes report
them by hash and tier, and routers ask which nodes hold a prompt's hashes. The index is
``hash -> {node -> tier bitmask}``, with no size and no lease, changed only by synchronous RPCs.

``match(count_as_hit=True)`` bumps a per-hash lifetime counter once per unique matched hash per
call. Counters are separate from the index, so they survive revocation; they expire after
UMBP_HIT_INDEX_TTL_SEC without a hit (``gc``). Everything lives in the master's memory (with
either metadata store): a restarted master starts empty and nodes report again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from mori.umbp.master.policy import READ_ORDER


@dataclass
class NodeMatch:
    node_id: str
    hashes_by_tier: dict[int, list[str]]


class ExternalKvIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._index: dict[str, dict[str, int]] = {}  # hash -> node -> tier bitmask
        self._by_node: dict[str, set[str]] = {}
        self._hits: dict[str, tuple[int, float]] = {}  # hash -> (lifetime count, last hit time)

    def report(self, node_id: str, hashes: list[str], tier: int) -> None:
        """Additive: the node holds ``hashes`` at ``tier`` (on top of what it reported before)."""
        with self._lock:
            owned = self._by_node.setdefault(node_id, set())
            for h in hashes:
                nodes = self._index.setdefault(h, {})
                nodes[node_id] = nodes.get(node_id, 0) | (1 << tier)
                owned.add(h)

    def revoke(self, node_id: str, hashes: list[str], tier: int) -> None:
        with self._lock:
            for h in hashes:
                self._clear(node_id, h, 1 << tier)

    def revoke_tier(self, node_id: str, tier: int) -> None:
        with self._lock:
            for h in list(self._by_node.get(node_id, ())):
                self._clear(node_id, h, 1 << tier)

    def revoke_node(self, node_id: str) -> None:
        """Everything of a node that left or was reaped; its counters' hits stay counted."""
        with self._lock:
            for h in list(self._by_node.get(node_id, ())):
                self._clear(node_id, h, -1)

    def _clear(self, node_id: str, h: str, bits: int) -> None:
        nodes = self._index.get(h)
        if nodes is None or node_id not in nodes:
            return
        left = nodes[node_id] & ~bits
        if left:
            nodes[node_id] = left
            return
        del nodes[node_id]
        self._by_node.get(node_id, set()).discard(h)
        if not self._by_node.get(node_id, True):
            del self._by_node[node_id]
        if not nodes:
            del self._index[h]

    def match(self, hashes: list[str], alive: set[str], count_as_hit: bool, now: float) -> list[NodeMatch]:
        """Per alive node holding any of ``hashes``: its hashes by tier (fastest tier first,
        request order within a tier, each hash once)."""
        unique = list(dict.fromkeys(hashes))
        out: dict[str, dict[int, list[str]]] = {}
        with self._lock:
            matched: list[str] = []
            for h in unique:
                hit = False
                for node_id, bits in self._index.get(h, {}).items():
                    if node_id not in alive:
                        continue
                    hit = True
                    tiers = out.setdefault(node_id, {})
                    for tier in READ_ORDER:
                        if bits & (1 << tier):
                            tiers.setdefault(int(tier), []).append(h)
                if hit:
                    matched.append(h)
            if count_as_hit:
                for h in matched:
                    self._hits[h] = (self._hits.get(h, (0, 0.0))[0] + 1, now)
        return [NodeMatch(n, dict(sorted(t.items(), key=lambda kv: READ_ORDER.index(kv[0])))) for n, t in out.items()]

    def hit_counts(self, hashes: list[str]) -> list[tuple[str, int]]:
        """Sparse (hash, lifetime hits) for the hashes that have a live counter, in request order."""
        with self._lock:
            return [(h, self._hits[h][0]) for h in dict.fromkeys(hashes) if h in self._hits]

    def gc(self, now: float, ttl_s: float) -> int:
        """Drops counters with no hit for ``ttl_s``; returns how many."""
        with self._lock:
            dead = [h for h, (_, last) in self._hits.items() if now - last > ttl_s]
            for h in dead:
                del self._hits[h]
            return len(dead)
