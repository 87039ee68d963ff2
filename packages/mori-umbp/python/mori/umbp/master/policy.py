# SPDX-License-Identifier: MIT
"""Pure placement and eviction decisions of the master (no I/O, so they are tested directly)."""

from __future__ import annotations

import random
from collections.abc import Sequence

from mori.umbp.master.store import Candidate, Location
from mori.umbp.types import PUT_TIERS, UMBPTierType

#: Read priority: fastest tier first (MORI's TierPriorityRouteGetStrategy).
READ_ORDER = (UMBPTierType.HBM, UMBPTierType.DRAM, UMBPTierType.SSD)


def pick_replica(locations: Sequence[Location], rng: random.Random) -> Location | None:
    """The replica to read: the fastest tier that has one, a random replica within it."""
    for tier in READ_ORDER:
        same = [loc for loc in locations if loc.tier == tier]
        if same:
            return rng.choice(same)
    return None


def pick_put_target(size: int, free: dict[tuple[str, int], int]) -> tuple[str, int] | None:
    """``most_available``: the (node, tier) with the most projected free bytes that fits ``size``,
    preferring the faster tier on a tie. The caller deducts the choice so a batch spreads out."""
    best: tuple[str, int] | None = None
    best_key: tuple[int, int] = (-1, 0)
    for (node, tier), avail in sorted(free.items()):
        if tier not in PUT_TIERS or avail < size:
            continue
        rank = (avail, -tier)
        if rank > best_key:
            best, best_key = (node, tier), rank
    return best


def select_victims(
    candidates: Sequence[Candidate], total: int, used: int, high: float, low: float, now: float
) -> list[Candidate]:
    """MORI's LruMasterEvictStrategy: nothing below ``high`` usage; above it, least recently used
    unleased blocks until usage would drop to ``low``."""
    if total <= 0 or used <= high * total:
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
