# SPDX-License-Identifier: MIT
"""The master's logic behind the UMBPMaster RPCs, independent of gRPC.

NOTE [index projection]: peers own every page. The master's index changes only through
heartbeats that carry numbered event bundles (seq 1, 2, ...). A bundle whose seq is not the next
one means events were lost: the master applies nothing more and asks for a full sync, and the
peer reships its whole snapshot with the seq it is current up to. Bundles already applied (a
retry after a lost response) are skipped, so applying is idempotent. An unknown node (a master
restarted on the in-memory store, or one that reaped it) is told EXPIRED: it registers again and
full-syncs, which rebuilds the index without any put being repeated.

NOTE [direct put]: a client may place a put itself, with the master's placement policy
(``policy.place_puts``) over the pool view it gets with its registration and periodic heartbeats,
and send it straight to the owner, skipping the route. The owner's commit then ships an
ADD-if-absent (ADD_IF_ABSENT here): applied only if no alive node holds the key elsewhere, decided
under the heartbeat lock, so of two writers that place one fresh key on two owners exactly one is
indexed. The other's key is refused (``HeartbeatResult.refused``): that owner drops its copy and
its writer hears ALREADY_EXISTS, what the route would have answered. A refusal is reported for
every if_absent ADD of the request, applied now or in an earlier request whose answer was lost,
as "not indexed on the caller", so a resent bundle gets the same answer.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from mori.umbp.master.external_kv import ExternalKvIndex
from mori.umbp.master.metrics import MasterMetrics
from mori.umbp.master.policy import pick_replica, place_puts
from mori.umbp.master.store import Location, MetadataStore, NodeInfo
from mori.umbp.types import UMBPTierType

log = logging.getLogger(__name__)

ADD, REMOVE = 0, 1
#: An ADD sent with if_absent (NOTE [direct put]); the master never stores this kind.
ADD_IF_ABSENT = 2


@dataclass(frozen=True)
class MasterTiming:
    heartbeat_ttl_s: float = 10.0
    interval_divisor: int = 2
    max_missed: int = 3
    lease_s: float = 2.0

    @property
    def heartbeat_interval_s(self) -> float:
        return self.heartbeat_ttl_s / max(1, self.interval_divisor)


@dataclass(frozen=True)
class HeartbeatResult:
    known: bool
    acked_seq: int
    request_full_sync: bool
    refused: tuple[str, ...] = ()  # NOTE [direct put]


@dataclass(frozen=True)
class PutRoute:
    outcome: str  # "ROUTED", "ALREADY_EXISTS" or "UNAVAILABLE"
    node: NodeInfo | None = None
    tier: int = 0


class Master:
    def __init__(
        self,
        store: MetadataStore,
        timing: MasterTiming,
        metrics: MasterMetrics,
        put_algo: str = "most_available",
        put_affinity: str = "none",
    ) -> None:
        self.store = store
        self.put_algo, self.put_affinity = put_algo, put_affinity
        self.timing = timing
        self.metrics = metrics
        # Heartbeats of one node must apply in order; one lock keeps the seq check and the apply
        # of a bundle atomic (the store's own operations are atomic but not the pair).
        self._hb_lock = threading.Lock()
        self._rng = random.Random()
        self.external_kv = ExternalKvIndex()
        self._since_restart: dict[str, float] = {}
        self._adopt_survivors()

    def _adopt_survivors(self) -> None:
        """NOTE [restart grace]: a master restarted on a store that survived it (Redis) finds nodes
        whose last heartbeat may be older than the expiry, only because it was down. The nodes that
        were alive when it went down (within the expiry of the newest heartbeat in the store) count
        as heard from at the restart, so they get a full expiry period to heartbeat again while
        their blocks keep being served; a node already dead by then expires as before."""
        try:
            nodes = self.store.list_nodes()
        except Exception as exc:  # the loops retry the store; without it there is nothing to adopt
            log.warning("cannot read the node registry at start: %s", exc)
            return
        if not nodes:
            return
        limit = self.timing.heartbeat_ttl_s * self.timing.max_missed
        down_at = max(n.last_heartbeat for n in nodes)
        now = time.time()
        self._since_restart = {n.node_id: now for n in nodes if down_at - n.last_heartbeat <= limit}
        log.info("restart: %d of %d stored nodes kept for %.1fs to heartbeat again", len(self._since_restart),
                 len(nodes), limit)  # fmt: skip

    def _last_heard(self, node: NodeInfo) -> float:
        return max(node.last_heartbeat, self._since_restart.get(node.node_id, 0.0))

    # -- registry -----------------------------------------------------------------------------
    def register(self, info: NodeInfo) -> None:
        now = time.time()
        info.last_heartbeat = info.registered_at = now
        info.seq = 0
        with self._hb_lock:
            self.store.upsert_node(info)
        self._export_capacity(info.node_id, info.capacities)
        log.info("registered node %r (peer %s, tiers %s)", info.node_id, info.peer_address, info.capacities)

    def unregister(self, node_id: str) -> None:
        self._since_restart.pop(node_id, None)
        with self._hb_lock:
            node = self.store.get_node(node_id)
            self.store.remove_node(node_id)
        self.external_kv.revoke_node(node_id)  # MORI: a node that leaves takes its external KV along
        if node is not None:
            self.metrics.forget_node(node_id, [UMBPTierType(t).name for t in node.capacities])
        log.info("unregistered node %r", node_id)

    def alive_nodes(self, now: float | None = None) -> dict[str, NodeInfo]:
        now = time.time() if now is None else now
        limit = self.timing.heartbeat_ttl_s * self.timing.max_missed
        return {n.node_id: n for n in self.store.list_nodes() if now - self._last_heard(n) <= limit}

    def reap(self) -> list[str]:
        """Expires nodes silent for TTL x max_missed; their locations go with them."""
        now = time.time()
        limit = self.timing.heartbeat_ttl_s * self.timing.max_missed
        dead = [n.node_id for n in self.store.list_nodes() if now - self._last_heard(n) > limit]
        for node_id in dead:
            log.warning("node %r missed heartbeats for %.1fs: expiring it and its blocks", node_id, limit)
            self.unregister(node_id)
            self.metrics.reaped.inc()
        return dead

    # -- heartbeats -----------------------------------------------------------------------------
    def heartbeat(
        self,
        node_id: str,
        bundles: list[tuple[int, list[tuple[int, str, int, int]]]],
        is_full_sync: bool,
        baseline: int,
        capacities: dict[int, tuple[int, int]],
    ) -> HeartbeatResult:
        """``bundles`` are (seq, [(kind, key, tier, size)]); see NOTE [index projection]."""
        now = time.time()
        with self._hb_lock:
            node = self.store.get_node(node_id)
            if node is None:
                return HeartbeatResult(False, 0, False)
            self.store.update_heartbeat(node_id, now, capacities)
            if is_full_sync:
                entries = [(key, tier, size) for _, evs in bundles for kind, key, tier, size in evs if kind != REMOVE]
                self.store.replace_node_locations(node_id, baseline, entries, now)
                self.metrics.full_sync.inc()
                log.info("node %r full sync: %d blocks, seq %d", node_id, len(entries), baseline)
                acked, gap = baseline, False
                refused: list[str] = []
            else:
                acked, gap = self._apply_bundles(node, bundles, now)
                refused = [] if gap else self._refused(node_id, bundles)
        self._export_capacity(node_id, capacities)
        return HeartbeatResult(True, acked, gap, tuple(refused))

    def _refused(self, node_id: str, bundles: list[tuple[int, list[tuple[int, str, int, int]]]]) -> list[str]:
        """The keys of the if_absent ADDs in ``bundles`` not indexed on ``node_id`` in their tier."""
        wanted = [(key, tier) for _, evs in bundles for kind, key, tier, _ in evs if kind == ADD_IF_ABSENT]
        if not wanted:
            return []
        places = self.store.placements([key for key, _ in wanted])
        return [key for (key, tier), held in zip(wanted, places, strict=True) if (node_id, tier) not in held]

    def _absent(self, node_id: str, adds: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
        """The if_absent ADDs of a bundle to apply: those of keys no alive node holds elsewhere
        (another node, or another tier of this one). Runs under the heartbeat lock, which every
        change of the index takes, so the check and the add are one step (NOTE [direct put])."""
        if not adds:
            return []
        alive = self.alive_nodes()
        keep = []
        for (key, tier, size), held in zip(adds, self.store.placements([key for key, _, _ in adds]), strict=True):
            if not any(node in alive and (node, t) != (node_id, tier) for node, t in held):
                keep.append((key, tier, size))
        self.metrics.child(self.metrics.route_put, "DIRECT").inc(len(keep))
        if len(keep) < len(adds):
            self.metrics.child(self.metrics.route_put, "DIRECT_ALREADY_EXISTS").inc(len(adds) - len(keep))
        return keep

    def _apply_bundles(
        self, node: NodeInfo, bundles: list[tuple[int, list[tuple[int, str, int, int]]]], now: float
    ) -> tuple[int, bool]:
        acked = node.seq
        for seq, events in sorted(bundles, key=lambda b: b[0]):
            if seq <= acked:
                continue  # already applied: the peer resent it after a lost response
            if seq != acked + 1:
                self.metrics.seq_gap.inc()
                log.warning(
                    "node %r: heartbeat seq gap (expected %d, got %d): asking a full sync", node.node_id, acked + 1, seq
                )
                return acked, True
            # The store applies a bundle's adds before its removes, so only the last event per
            # (key, tier) may reach it: an SSD eviction and a later re-spill of the same key can
            # share a bundle, and must leave the key present.
            last = {(key, tier): (kind, size) for kind, key, tier, size in events}
            adds = [(key, tier, size) for (key, tier), (kind, size) in last.items() if kind == ADD]
            maybe = [(key, tier, size) for (key, tier), (kind, size) in last.items() if kind == ADD_IF_ABSENT]
            adds += self._absent(node.node_id, maybe)
            removes = [(key, tier) for (key, tier), (kind, _) in last.items() if kind == REMOVE]
            self.store.apply_events(node.node_id, seq, adds, removes, now)
            acked = seq
        return acked, False

    def _export_capacity(self, node_id: str, capacities: dict[int, tuple[int, int]]) -> None:
        for tier, (total, avail) in capacities.items():
            self.metrics.set_capacity(node_id, UMBPTierType(tier).name, total, avail)

    # -- routing ------------------------------------------------------------------------------
    def route_get(self, keys: list[str], exclude: set[str]) -> list[tuple[Location, NodeInfo] | None]:
        """Per key, the replica to read (fastest tier, random within it) or None; a hit records an
        access and grants a routing lease that keeps the block from being evicted."""
        alive = self.alive_nodes()
        now = time.time()
        out: list[tuple[Location, NodeInfo] | None] = []
        hits: list[str] = []
        for key, locations in zip(keys, self.store.lookup(keys), strict=True):
            usable = [loc for loc in locations if loc.node_id in alive and loc.node_id not in exclude]
            loc = pick_replica(usable, self._rng)
            if loc is None:
                out.append(None)
                self.metrics.child(self.metrics.route_get, "miss").inc()
                continue
            hits.append(key)
            out.append((loc, alive[loc.node_id]))
            self.metrics.child(self.metrics.route_get, "hit").inc()
        self.store.record_accesses(hits, now, now + self.timing.lease_s)
        return out

    def record_accesses(self, keys: list[str]) -> None:
        """Reads an owner served without a route (NOTE [owner cache] in mori.umbp.client.owners):
        accesses for the eviction order, without a routing lease."""
        self.store.record_accesses(keys, time.time(), 0.0)

    def route_put(self, keys: list[str], sizes: list[int], exclude: set[str], requester: str = "") -> list[PutRoute]:
        """Master-side dedup (also within the batch), then tier-first placement by the configured
        algorithm and affinity (see ``policy.route_put_batch``)."""
        alive = self.alive_nodes()
        existing = self.store.lookup(keys)
        seen: set[str] = set()
        todo: list[int | None] = []
        for key, size, locs in zip(keys, sizes, existing, strict=True):
            # A copy on an excluded node does not count: the writer found that node failing, so a
            # copy there (a commit whose answer was lost) may be gone with it.
            dup = any(loc.node_id in alive and loc.node_id not in exclude for loc in locs) or key in seen
            todo.append(None if dup else size)
            seen.add(key)
        nodes = {n.node_id: n.capacities for n in alive.values() if n.node_id not in exclude}
        picks = place_puts(todo, nodes, self.put_algo, self.put_affinity, requester, self._rng)
        routes: list[PutRoute] = []
        for wanted, pick in zip(todo, picks, strict=True):
            if wanted is None:
                routes.append(PutRoute("ALREADY_EXISTS"))
            elif pick is None:
                routes.append(PutRoute("UNAVAILABLE"))
            else:
                routes.append(PutRoute("ROUTED", alive[pick[0]], pick[1]))
            self.metrics.child(self.metrics.route_put, routes[-1].outcome).inc()
        return routes

    def pool_view(self) -> list[NodeInfo]:
        """The alive nodes, for clients that place their own puts (NOTE [direct put])."""
        return list(self.alive_nodes().values())

    def lookup(self, keys: list[str]) -> list[bool]:
        """A pure probe: no lease, no access bump."""
        return self.store.held_by(keys, self.alive_nodes())
