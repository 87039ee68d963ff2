# SPDX-License-Identifier: MIT
"""Pure placement and eviction decisions of the master (no I/O, so they are tested directly)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from mori.umbp.master.store import Candidate, Location
from mori.umbp.types import PAGE_TIERS, UMBPTierType

#: Read priority: fastest tier first (MORI's TierPriorityRouteGetStrategy).
READ_ORDER = (UMBPTierType.HBM, UMBPTierType.DRAM, UMBPTierType.SSD)


def pick_replica(locations: Sequence[Location], rng: random.Random) -> Location | None:
    """The replica to read: the fastest tier that has one, a random replica within it."""
    for tier in READ_ORDER:
        same = [loc for loc in locations if loc.tier == tier]
        if same:
            return rng.choice(same)
    return None


#: Put order of tiers: a put lands in HBM while any eligible node has room there, else DRAM.
PUT_ORDER = (UMBPTierType.HBM, UMBPTierType.DRAM)
_PUT_TIERS = tuple(int(t) for t in PUT_ORDER)
ALGOS = ("most_available", "random")
AFFINITIES = ("none", "same", "local")

Free = dict[tuple[str, int], int]


def _eligible(free: Free, tier: int, size: int) -> list[tuple[str, int]]:
    return sorted((node, avail) for (node, t), avail in free.items() if t == tier and avail >= size)


def _pick_in_tiers(
    free: Free, size: int, algo: str, rng: random.Random, prefer: str | None = None
) -> tuple[str, int] | None:
    """MORI's SelectByAlgo: the first tier of PUT_ORDER where some node fits ``size``; there the
    preferred node if it fits, else by ``algo`` (most free bytes, ties to the smaller node id; or
    random weighted by free bytes)."""
    for tier in _PUT_TIERS:
        if algo != "random" and prefer is None:  # the common case, once per key: no list, no sort
            best: tuple[int, str] | None = None
            for (node, t), avail in free.items():
                if t == tier and avail >= size and (best is None or (avail, best[1]) > (best[0], node)):
                    best = (avail, node)  # the most free bytes, a tie to the smaller node id
            if best is not None:
                return best[1], tier
            continue
        nodes = _eligible(free, tier, size)
        if not nodes:
            continue
        if prefer is not None and any(n == prefer for n, _ in nodes):
            return prefer, tier
        if algo == "random":
            return rng.choices([n for n, _ in nodes], [a for _, a in nodes])[0], tier
        best_node = nodes[0]
        for cand in nodes[1:]:
            if cand[1] > best_node[1]:  # strict: a tie keeps the earlier (smaller) node id
                best_node = cand
        return best_node[0], tier
    return None


def _pick_on_node(free: Free, node: str, size: int, tier: int | None = None) -> tuple[str, int] | None:
    for t in PUT_ORDER if tier is None else (tier,):
        if free.get((node, int(t)), -1) >= size:
            return node, int(t)
    return None


def route_put_batch(
    sizes: Sequence[int | None],
    free: Free,
    algo: str = "most_available",
    affinity: str = "none",
    requester: str = "",
    rng: random.Random | None = None,
) -> list[tuple[str, int] | None]:
    """MORI's ConfigurableRoutePutStrategy over one batch: per size a (node, tier) or None (no room);
    ``None`` sizes (keys that already exist) are skipped. ``free`` maps (node, tier) to projected
    free bytes and is charged for each pick, so a batch spreads out. Affinity biases the node and
    never fails a key that plain placement could route: ``local`` tries the requester's own HBM
    then DRAM first; ``same`` pins the batch to one node and tier when the whole of it fits there,
    else prefers the node of the previous pick within each tier."""
    rng = rng if rng is not None else random.Random()
    anchor: str | None = (requester or None) if affinity == "local" else None
    anchor_tier: int | None = None
    if affinity == "same":
        total = sum(s for s in sizes if s is not None)
        whole = _pick_in_tiers(free, total, algo, rng) if total else None
        if whole is not None:
            anchor, anchor_tier = whole
    out: list[tuple[str, int] | None] = []
    for size in sizes:
        if size is None:
            out.append(None)
            continue
        pick = None
        if affinity == "local" and anchor is not None:
            pick = _pick_on_node(free, anchor, size)
        elif affinity == "same" and anchor is not None and anchor_tier is not None:
            pick = _pick_on_node(free, anchor, size, anchor_tier)
        if pick is None:
            pick = _pick_in_tiers(free, size, algo, rng, anchor if affinity == "same" else None)
            if affinity == "same":
                anchor_tier = None
                anchor = pick[0] if pick is not None else anchor
        if pick is not None:
            free[pick] -= size
        out.append(pick)
    return out


#: node id -> {tier: (total bytes, available bytes)}, as the nodes last reported.
Capacities = dict[str, dict[int, tuple[int, int]]]


def place_puts(
    sizes: Sequence[int | None],
    nodes: Capacities,
    algo: str = "most_available",
    affinity: str = "none",
    requester: str = "",
    rng: random.Random | None = None,
) -> list[tuple[str, int] | None]:
    """Where each put of ``sizes`` goes (None sizes are skipped): ``route_put_batch`` over the
    nodes' free bytes; keys no node has the room free for are placed by capacity instead, since
    the owner evicts on demand (NOTE [eviction on demand] in mori.umbp.peer.store). The master's
    route and a client placing its own puts (NOTE [direct put]) both decide with this."""
    free = {(node, tier): avail for node, caps in nodes.items() for tier, (_, avail) in caps.items()}
    picks = route_put_batch(sizes, free, algo, affinity, requester, rng)
    unplaced = [None if pick is not None else want for want, pick in zip(sizes, picks, strict=True)]
    if any(want is not None for want in unplaced):
        room = {
            (node, tier): total
            for node, caps in nodes.items()
            for tier, (total, _) in caps.items()
            if tier in PAGE_TIERS
        }
        again = route_put_batch(unplaced, room, algo, affinity, requester, rng)
        picks = [pick if pick is not None else alt for pick, alt in zip(picks, again, strict=True)]
    return picks


def over_high_watermark(total: int, used: int, high: float) -> bool:
    """Whether a tier of ``total`` bytes with ``used`` in use is past its ``high`` watermark: only
    then has the timed eviction anything to select."""
    return total > 0 and used > high * total


def select_victims(
    candidates: Sequence[Candidate], total: int, used: int, high: float, low: float, now: float
) -> list[Candidate]:
    """MORI's LruMasterEvictStrategy: nothing below ``high`` usage; above it, least recently used
    unleased blocks until usage would drop to ``low``."""
    if not over_high_watermark(total, used, high):
        return []
    need = used - int(low * total)
    victims: list[Candidate] = []
    for cand in sorted(candidates, key=lambda c: (c.last_access, c.key)):
        if need <= 0:
            break
        if cand.lease_until > now:
            continue  # a reader was routed here in the last lease period
        victims.append(cand)
        need -= cand.size
    return victims
