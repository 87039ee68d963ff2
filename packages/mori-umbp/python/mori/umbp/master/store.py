# SPDX-License-Identifier: MIT
"""The master's metadata store: the interface and the in-memory implementation.

The store holds the node registry and the block index (key -> locations on (node, tier)), plus the
per-key access time and routing lease that eviction reads. It holds no per-put state: peers own
every page, and the index is a projection rebuilt from their heartbeats (NOTE [index projection]).
Timestamps always come from the caller (the master's clock), never from the store.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Container, Iterable
from dataclasses import dataclass, field


@dataclass
class NodeInfo:
    """A registered node as the master knows it."""

    node_id: str
    node_address: str
    peer_address: str
    engine_desc: bytes
    tags: list[str] = field(default_factory=list)
    #: tier value -> (total bytes, available bytes), as the node last reported.
    capacities: dict[int, tuple[int, int]] = field(default_factory=dict)
    last_heartbeat: float = 0.0
    registered_at: float = 0.0
    #: The last event bundle seq applied; the next bundle must carry seq + 1.
    seq: int = 0


@dataclass(frozen=True)
class Location:
    node_id: str
    tier: int
    size: int


@dataclass(frozen=True)
class Candidate:
    """A block on one (node, tier) with what LRU eviction needs to rank it."""

    key: str
    size: int
    last_access: float
    lease_until: float


class MetadataStore(ABC):
    """What the master needs of a store. Implementations must be thread-safe."""

    @abstractmethod
    def upsert_node(self, info: NodeInfo) -> None:
        """Registers (or re-registers) a node; a re-registration wipes its locations and seq."""

    @abstractmethod
    def get_node(self, node_id: str) -> NodeInfo | None: ...

    @abstractmethod
    def list_nodes(self) -> list[NodeInfo]: ...

    @abstractmethod
    def update_heartbeat(self, node_id: str, now: float, capacities: dict[int, tuple[int, int]]) -> None: ...

    @abstractmethod
    def remove_node(self, node_id: str) -> None:
        """Forgets a node and every location on it."""

    @abstractmethod
    def apply_events(
        self,
        node_id: str,
        seq: int,
        adds: Iterable[tuple[str, int, int]],
        removes: Iterable[tuple[str, int]],
        now: float,
    ) -> None:
        """Applies one bundle: ``adds`` are (key, tier, size), ``removes`` (key, tier); sets the
        node's seq to ``seq``. Duplicate adds are idempotent; a remove drops only that tier."""

    @abstractmethod
    def replace_node_locations(
        self, node_id: str, seq: int, entries: Iterable[tuple[str, int, int]], now: float
    ) -> None:
        """Full sync: the node's locations become exactly ``entries`` (key, tier, size)."""

    @abstractmethod
    def lookup(self, keys: list[str]) -> list[list[Location]]: ...

    def placements(self, keys: list[str]) -> list[tuple[tuple[str, int], ...]]:
        """Per key, the (node, tier) pairs that hold it: what a heartbeat's if-absent checks need
        of ``lookup``, which a store may answer without building a Location per replica."""
        return [tuple((loc.node_id, loc.tier) for loc in locs) for locs in self.lookup(keys)]

    def held_by(self, keys: list[str], nodes: Container[str]) -> list[bool]:
        """Per key, whether one of ``nodes`` holds it (a probe: no access recorded)."""
        return [any(node in nodes for node, _ in held) for held in self.placements(keys)]

    @abstractmethod
    def record_access(self, key: str, now: float, lease_until: float) -> None:
        """Bumps the key's LRU time and extends its routing lease."""

    def record_accesses(self, keys: list[str], now: float, lease_until: float) -> None:
        """``record_access`` of each of ``keys``; a store may take them in one go."""
        for key in keys:
            self.record_access(key, now, lease_until)

    @abstractmethod
    def candidates(self, node_id: str, tier: int) -> list[Candidate]:
        """Every block on (node, tier), for the eviction policy to rank."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases connections; the in-memory store has none."""


class InMemoryMetadataStore(MetadataStore):
    """The default store: dicts under one lock. A restarted master starts empty and heals through
    the peers' full-sync heartbeats."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeInfo] = {}
        self._blocks: dict[str, dict[tuple[str, int], int]] = {}
        self._by_node: dict[str, set[str]] = {}
        self._meta: dict[str, tuple[float, float]] = {}  # key -> (last_access, lease_until)

    def upsert_node(self, info: NodeInfo) -> None:
        with self._lock:
            self._drop_locations(info.node_id)
            self._nodes[info.node_id] = info

    def get_node(self, node_id: str) -> NodeInfo | None:
        with self._lock:
            return self._nodes.get(node_id)

    def list_nodes(self) -> list[NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def update_heartbeat(self, node_id: str, now: float, capacities: dict[int, tuple[int, int]]) -> None:
        with self._lock:
            node = self._nodes.get(node_id)
            if node is not None:
                node.last_heartbeat = now
                if capacities:
                    node.capacities = dict(capacities)

    def remove_node(self, node_id: str) -> None:
        with self._lock:
            self._drop_locations(node_id)
            self._nodes.pop(node_id, None)

    def apply_events(
        self,
        node_id: str,
        seq: int,
        adds: Iterable[tuple[str, int, int]],
        removes: Iterable[tuple[str, int]],
        now: float,
    ) -> None:
        with self._lock:
            for key, tier, size in adds:
                self._add(node_id, key, tier, size, now)
            for key, tier in removes:
                self._remove(node_id, key, tier)
            if node_id in self._nodes:
                self._nodes[node_id].seq = seq

    def replace_node_locations(
        self, node_id: str, seq: int, entries: Iterable[tuple[str, int, int]], now: float
    ) -> None:
        with self._lock:
            self._drop_locations(node_id)
            for key, tier, size in entries:
                self._add(node_id, key, tier, size, now)
            if node_id in self._nodes:
                self._nodes[node_id].seq = seq

    def lookup(self, keys: list[str]) -> list[list[Location]]:
        with self._lock:
            return [[Location(n, t, s) for (n, t), s in self._blocks.get(key, {}).items()] for key in keys]

    def placements(self, keys: list[str]) -> list[tuple[tuple[str, int], ...]]:
        blocks = self._blocks
        with self._lock:
            return [tuple(blocks[key]) if key in blocks else () for key in keys]

    def held_by(self, keys: list[str], nodes: Container[str]) -> list[bool]:
        blocks = self._blocks
        with self._lock:
            # Every node holding blocks is among ``nodes`` (all alive, as usual): a probe of a
            # prompt's chain is then one membership test per key, at C speed.
            if all(node in nodes for node, held in self._by_node.items() if held):
                return list(map(blocks.__contains__, keys))
            return [any(node in nodes for node, _ in blocks.get(key, ())) for key in keys]

    def record_access(self, key: str, now: float, lease_until: float) -> None:
        self.record_accesses([key], now, lease_until)

    def record_accesses(self, keys: list[str], now: float, lease_until: float) -> None:
        blocks, meta = self._blocks, self._meta
        with self._lock:  # once for the batch: owners report every block a get read
            for key in keys:
                if key in blocks:
                    _, lease = meta.get(key, (0.0, 0.0))
                    meta[key] = (now, max(lease, lease_until))

    def candidates(self, node_id: str, tier: int) -> list[Candidate]:
        with self._lock:
            out = []
            for key in self._by_node.get(node_id, ()):
                size = self._blocks.get(key, {}).get((node_id, tier))
                if size is not None:
                    last, lease = self._meta.get(key, (0.0, 0.0))
                    out.append(Candidate(key, size, last, lease))
            return out

    # -- under the lock -----------------------------------------------------------------------
    def _add(self, node_id: str, key: str, tier: int, size: int, now: float) -> None:
        self._blocks.setdefault(key, {})[(node_id, tier)] = size
        self._by_node.setdefault(node_id, set()).add(key)
        self._meta.setdefault(key, (now, 0.0))

    def _remove(self, node_id: str, key: str, tier: int) -> None:
        locs = self._blocks.get(key)
        if locs is None:
            return
        locs.pop((node_id, tier), None)
        if not any(n == node_id for n, _ in locs):
            self._by_node.get(node_id, set()).discard(key)
        if not locs:
            del self._blocks[key]
            self._meta.pop(key, None)

    def _drop_locations(self, node_id: str) -> None:
        for key in list(self._by_node.pop(node_id, ())):
            locs = self._blocks.get(key, {})
            for loc in [loc for loc in locs if loc[0] == node_id]:
                del locs[loc]
            if not locs:
                self._blocks.pop(key, None)
                self._meta.pop(key, None)
