# SPDX-License-Identifier: MIT
"""The blocks a peer owns: its page tiers (DRAM, optionally HBM), pending slots and committed
blocks, read leases, and the event log that feeds the master.

NOTE [one key, many writers]: writers of one fresh key race (shared prefixes). The first gets the
slot; a second waits (bounded by its call's deadline) until the key is committed here *and* the
master acknowledged the ADD, and only then hears EXISTS; if the first aborts or dies, its slot
expires and the second allocates it. Past its wait it hears PENDING, which its put reports as not
stored. So nobody is told a block exists that a get could miss.

A put is two-phase: ``allocate`` reserves pages of one tier under a pending slot (invisible to
everyone), the writer fills them with mori-io, ``commit`` makes the key visible by queueing an
ADD event. A slot not committed within UMBP_PENDING_SLOT_TTL_MS is freed, so a writer that dies
mid-put leaves neither a visible key nor leaked pages, in HBM as in DRAM.

NOTE [HBM demotion]: evicting an HBM block (the master's watermark LRU names the tier) moves it
to this peer's DRAM when DRAM has free pages, as MORI's tier transition does (copy down, then
free the source), and drops it otherwise. The copy runs outside the lock with the key marked
moving (no second eviction, no spill race); the REMOVE(HBM) and ADD(DRAM) events are queued
together, so the master's index moves the key in one bundle. A reader that resolved the HBM
pages during the copy holds a read lease: those pages are freed only when it ends.

NOTE [eviction on demand]: an allocation that would take its tier past the high watermark
(UMBP_DRAM_HIGH_WM), or finds it full, does not fail while the tier holds evictable blocks: it
evicts by the configured policy (``eviction.policy``: LRU by this peer's accesses, or
prefix-aware) until the block fits with the tier at the watermark, so the pool stays there
rather than filling up and the master's timed pass (which starts above it) has no work. Victims skip what
the timed eviction skips here (read leases, blocks being spilled or demoted) plus commits the
master has not acknowledged yet; HBM victims are demoted to DRAM when it has room. Their
REMOVE events reach the master with the commit's acknowledged heartbeat. Only when every block
of the tier is busy does the allocation answer NO_SPACE.

NOTE [waiting for room]: busy does not last. A read lease ends at a time the peer knows (500 ms
at most), a commit is evictable once the master acknowledges it (one heartbeat), another writer's
pending slot becomes a block at its commit (or is freed at its TTL), a spill or demotion ends with
its copy. On the `lru` trace a request's own get can lease both peers through; the put of its
misses was then refused by one peer, routed to the other, refused again and given up within a few
milliseconds, while the first lease ended 175 ms later. Concurrent writers into a full peer were
refused the same way while their own writes in flight held every page. So a NO_SPACE answer
carries a ``NoRoom`` report: the bytes needed, free and evictable, what holds the rest, and when
to ask again: at the soonest lease end, after a short poll for what ends without a clock here, at
once when the room was there and another writer took it, never when what ends by itself cannot
make the room. A writer whose every peer refused asks them again when they said, within its put's
deadline (``_wait_for_room`` in mori.umbp.client.pool_client); it holds no slot meanwhile, so
writers waiting for room never hold room another one waits for. Its put fails only when the
deadline comes first, with a NoRoomError naming the peer, the bytes needed and those evictable.

NOTE [direct put] (the master's side in mori.umbp.master.core): a commit the writer placed itself
queues an ADD-if-absent and stays unpublished (so not evictable, and not spilled yet) until a
heartbeat's answer decides it: indexed, it is published like any commit; refused (another node
holds the key), the block is dropped here without an event (the master never indexed it), and
its Block is marked ``refused`` so the committer answers ALREADY_EXISTS.

NOTE [chain order]: a batch's keys are a prompt's chain, head first, and a lookup stops at the
first missing block, so a chain is worth keeping from its head. The peer service resolves and
commits a batch's keys last to first: the head becomes the most recently used, plain LRU then
evicts a chain from its tail, and ``prefix_aware_lru`` (deepest of the window first) agrees.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mori.io import IOEngine
from mori.umbp import devmem
from mori.umbp.peer.events import ADD, ADD_IF_ABSENT, REMOVE, Event, EventLog
from mori.umbp.peer.leases import ReadLeases
from mori.umbp.peer.lru import EvictionOrder
from mori.umbp.peer.pools import PagePool
from mori.umbp.peer.store_ssd import SsdSide
from mori.umbp.types import UMBPTierType, tier_name

log = logging.getLogger(__name__)

#: NOTE [waiting for room]: when a writer asks again for room held by what ends without a clock
#: here (a commit the master has not acknowledged, another writer's pending slot, a spill's copy).
ROOM_POLL_S = 0.02

#: Accessed keys kept for the next heartbeat (the master reads at most 4096 of them).
ACCESSED_CAP = 4096

#: Where an evicted block of a tier moves to on the same peer (MORI's offload_to), if it fits.
DEMOTE_TO = {int(UMBPTierType.HBM): int(UMBPTierType.DRAM)}


@dataclass
class Block:
    key: str
    pages: list[int]
    size: int
    tier: int
    depth: int = -1
    refused: bool = False  # NOTE [direct put]: the master refused its ADD-if-absent; dropped


@dataclass
class Slot:
    key: str
    pages: list[int]
    size: int
    tier: int
    deadline: float
    depth: int = -1
    owner: str = ""  # the node id that allocated it (its pending slots are capped)


@dataclass(frozen=True)
class NoRoom:
    """Why a page tier had no room for ``needed`` bytes, in bytes (NOTE [waiting for room]): free,
    evictable now, and held by what eviction skips; ``retry_after_s`` says when room may be there
    (0: at once; None: not by itself, what holds the tier does not end or is too little)."""

    tier: int
    needed: int
    free: int
    evictable: int
    leased: int
    pinned: int  # being spilled to SSD or demoted to a slower tier
    unacknowledged: int  # committed, the master has not acknowledged it yet
    pending: int  # allocated by writers, not committed yet
    draining: int  # freed once its last reader's lease ends
    retry_after_s: float | None

    def __str__(self) -> str:
        when = (
            "none of it frees room by itself"
            if self.retry_after_s is None
            else f"room may come in {self.retry_after_s * 1000:.0f} ms"
        )
        return (
            f"no room in {tier_name(self.tier)} for {self.needed} bytes: {self.free} bytes free, "
            f"{self.evictable} evictable; held by read leases {self.leased}, pins {self.pinned}, "
            f"unacknowledged commits {self.unacknowledged}, pending slots {self.pending}, "
            f"draining {self.draining}; {when}"
        )


class PeerStore(SsdSide):
    def __init__(
        self,
        pools: Sequence[PagePool],
        pending_ttl_s: float,
        read_lease_s: float,
        max_pending_per_node: int = 64,
        policy: str = "lru",
        window: int = 16,
        high_watermark: float = 1.0,
    ) -> None:
        self.pools: dict[int, PagePool] = {p.tier: p for p in pools}
        # NOTE [eviction on demand]: each page tier's blocks in eviction order.
        self._orders = {t: EvictionOrder(policy, window) for t in self.pools}
        self.high_watermark = high_watermark
        # Sends one heartbeat for the unacknowledged commits; True once acknowledged (the node
        # sets it; None: eviction does not wait for one).
        self.flush_unpublished: Callable[[], bool] | None = None
        self.events = EventLog()
        self.pending_ttl_s = pending_ttl_s
        self.read_lease_s = read_lease_s
        self.max_pending_per_node = max_pending_per_node
        self._lock = threading.Lock()
        # Wakes writers waiting on a key another writer holds (NOTE [one key, many writers]).
        self._cond = threading.Condition(self._lock)
        self._unpublished: set[str] = set()  # committed here, not yet acknowledged by the master
        self._conditional: dict[str, Block] = {}  # ADD-if-absent commits not decided yet (NOTE [direct put])
        self._accessed: set[str] = set()  # resolved since the last heartbeat (NOTE [owner cache])
        self._slots: dict[int, Slot] = {}
        # Indexes of _slots, kept by _add_slot/_pop_slot, so an allocation asks "is this key held"
        # and "how many slots does this node hold" without a scan of every pending slot.
        self._slot_of_key: dict[str, int] = {}
        self._pending_of: dict[str, int] = {}
        self._blocks: dict[str, Block] = {}
        self._leases = ReadLeases()
        self._moving: set[str] = set()
        self._draining: list[tuple[float, PagePool, list[int]]] = []  # (free after, pool, pages)
        self._ids = itertools.count(1)
        SsdSide.__init__(self)

    # -- capacity -------------------------------------------------------------------------------
    def pool(self, tier: int) -> PagePool | None:
        pool = self.pools.get(tier)
        return pool if pool is not None and pool.capacity else None

    def capacities(self) -> dict[int, tuple[int, int]]:
        caps = {t: (p.capacity, p.alloc.available) for t, p in self.pools.items() if p.capacity}
        if self.ssd is not None:
            caps[int(UMBPTierType.SSD)] = (self.ssd.capacity, self.ssd.capacity - self.ssd.used)
        return caps

    # -- put ------------------------------------------------------------------------------------
    def allocate(
        self,
        key: str,
        size: int,
        tier: int,
        depth: int = -1,
        owner: str = "",
        wait_s: float = 0.0,
        expire: bool = True,
        watermark: bool = True,
    ) -> tuple[str, int, list[int]]:
        """("ALLOCATED", slot id, pages); ("EXISTS", 0, []) only once the key is committed here and
        the master acknowledged it; ("PENDING", 0, []) when another writer still held it after
        ``wait_s``; ("LIMIT", 0, []) when ``owner`` holds max_pending_per_node slots already;
        ("NO_SPACE", 0, []) or ("NO_TIER", 0, []). See NOTE [one key, many writers]. ``expire``
        False: the caller expired the pending slots just before (once for many keys). ``watermark``
        False: the caller's batch pass (``make_room_for``) found nothing more to evict a moment
        ago, so this takes free pages past the watermark without looking again, and evicts only
        when no page is free (NOTE [batch eviction])."""
        pool = self.pool(tier)
        if pool is None:
            return "NO_TIER", 0, []
        deadline = time.monotonic() + wait_s
        made_room = False
        while True:
            if expire:
                self.expire_slots()
            expire = True  # a retry after a wait or an eviction expires them again
            with self._cond:
                if key in self._blocks and key not in self._unpublished:
                    return "EXISTS", 0, []  # peer-side dedup: the master's index may lag
                holder = self._slot_of_key.get(key)
                holders = [] if holder is None else [self._slots[holder].deadline]
                if not holders and key not in self._blocks:
                    if self._pending_of.get(owner, 0) >= self.max_pending_per_node:
                        return "LIMIT", 0, []
                    over = (
                        watermark
                        and not made_room
                        and self._over_watermark(pool, pool.alloc.pages_for(size) * pool.page_size)
                    )
                    pages = None if over else pool.alloc.alloc(size)
                    if pages is not None:
                        slot_id = next(self._ids)
                        self._add_slot(
                            slot_id, Slot(key, pages, size, tier, time.monotonic() + self.pending_ttl_s, depth, owner)
                        )
                        return "ALLOCATED", slot_id, pages
                    if made_room:
                        return "NO_SPACE", 0, []
                else:
                    now = time.monotonic()
                    if now >= deadline:
                        return "PENDING", 0, []
                    # Woken by a commit, publish, abort or eviction; or at the holder's TTL, to expire it.
                    self._cond.wait(max(0.001, min([deadline, *holders]) - now))
                    continue
            # Full, or past the watermark: evict (outside the lock, as EvictKey does), then retry once.
            made_room = True
            if not self.make_room(tier, size):
                return "NO_SPACE", 0, []

    def _add_slot(self, slot_id: int, slot: Slot) -> None:
        """Under the lock."""
        self._slots[slot_id] = slot
        self._slot_of_key[slot.key] = slot_id
        self._pending_of[slot.owner] = self._pending_of.get(slot.owner, 0) + 1

    def _pop_slot(self, slot_id: int) -> Slot | None:
        """Under the lock: the slot, gone from _slots and its indexes (None: unknown)."""
        slot = self._slots.pop(slot_id, None)
        if slot is None:
            return None
        if self._slot_of_key.get(slot.key) == slot_id:
            del self._slot_of_key[slot.key]
        left = self._pending_of[slot.owner] - 1
        if left:
            self._pending_of[slot.owner] = left
        else:
            del self._pending_of[slot.owner]
        return slot

    def _over_watermark(self, pool: PagePool, need: int) -> bool:
        """Whether taking ``need`` more bytes puts ``pool`` past its high watermark."""
        return pool.capacity - pool.alloc.available + need > pool.capacity * self.high_watermark

    def no_room(self, tier: int, size: int) -> NoRoom:
        """NOTE [waiting for room]: what holds ``tier`` now that a block of ``size`` bytes found no
        room in it. Walks the tier's blocks: only asked after a refusal."""
        pool = self.pools[tier]
        need = pool.alloc.pages_for(size) * pool.page_size
        now = time.monotonic()
        held = dict.fromkeys(("evictable", "leased", "pinned", "unacknowledged"), 0)
        lease_ends: list[float] = []
        with self._lock:
            free = pool.alloc.available
            for key, block in self._blocks.items():
                if block.tier != tier:
                    continue
                lease = self._leases.end(key)
                if key in self._pinned or key in self._moving:
                    kind = "pinned"
                elif key in self._unpublished:
                    kind = "unacknowledged"
                elif lease > now:
                    kind = "leased"
                    lease_ends.append(lease)
                else:
                    kind = "evictable"
                held[kind] += len(block.pages) * pool.page_size
            pending = sum(len(s.pages) for s in self._slots.values() if s.tier == tier) * pool.page_size
            drains = [(end, len(pages) * pool.page_size) for end, p, pages in self._draining if p is pool]
        draining = sum(n for _, n in drains)
        lease_ends += [end for end, _ in drains]
        clockless = held["pinned"] + held["unacknowledged"] + pending
        if need > free + sum(held.values()) + pending + draining:
            retry: float | None = None
        elif free + held["evictable"] >= need:
            retry = 0.0  # the room was there: another writer took what this call's eviction made
        else:
            soonest = [end - now for end in lease_ends] + ([ROOM_POLL_S] if clockless else [])
            retry = max(0.0, min(soonest)) if soonest else None
        return NoRoom(
            tier,
            need,
            free,
            held["evictable"],
            held["leased"],
            held["pinned"],
            held["unacknowledged"],
            pending,
            draining,
            retry,
        )

    def make_room(self, tier: int, size: int) -> bool:
        """NOTE [eviction on demand]: evicts victims of ``tier`` by the policy until ``size`` bytes
        fit and the tier is at its high watermark with them; False when they still do not fit."""
        pool = self.pools[tier]
        return self._make_room_pages(tier, pool.alloc.pages_for(size) * pool.page_size)

    def make_room_for(self, tier: int, entries: Sequence[tuple[str, int]], owner: str = "") -> bool:
        """NOTE [batch eviction]: room for a batch's ``(key, size)`` entries of ``tier`` made once,
        before its allocations, instead of one eviction pass per key. Counts only keys neither
        stored nor held here (those allocate nothing), and no more of them than ``owner`` may
        still hold pending (the rest are refused LIMIT); an allocation that still finds no room
        (another writer took it meanwhile) makes its own, as before. False when the pass ran out
        of victims short of that room (the rest of the tier is busy: read leases, commits not
        acknowledged, pending slots): the batch's allocations then take free pages past the
        watermark without scanning again per key (which found nothing either and, on a full pool
        under reads, was most of a peer's eviction work), and scan only when no page is free."""
        pool = self.pool(tier)
        if pool is None or not entries:
            return True
        with self._lock:
            fresh = {key: size for key, size in entries if key not in self._blocks and key not in self._slot_of_key}
            allowed = max(0, self.max_pending_per_node - self._pending_of.get(owner, 0))
        need = sum(pool.alloc.pages_for(size) for size in list(fresh.values())[:allowed]) * pool.page_size
        if not need or need > pool.capacity * self.high_watermark:
            return True
        self._make_room_pages(tier, need)
        with self._lock:
            return not self._over_watermark(pool, need)

    def _make_room_pages(self, tier: int, need: int) -> bool:
        """Evicts until ``need`` bytes are free with ``tier`` at its high watermark after taking them.
        Victims are picked by the policy, as many as the shortfall takes, under one hold of the
        lock, then dropped by one ``evict`` (NOTE [batch eviction]); a victim that turned busy in
        between (a reader's lease) is skipped and the next pass picks another."""
        pool = self.pools[tier]
        order = self._orders[tier]
        page = pool.page_size
        target = pool.capacity * self.high_watermark
        tried: set[str] = set()
        flushed = False
        while True:
            victims: list[str] = []
            with self._lock:
                free = pool.alloc.available
                if free >= need and pool.capacity - free + need <= target:
                    return True
                # Bytes to free so that ``need`` fits, and fits under the watermark.
                short = max(need - free, pool.capacity - free + need - int(target))
                # NOTE [running leases]: what must be skipped, as one set, so the scan runs in C.
                busy = self._leases.running(time.monotonic()) | self._pinned | self._moving | self._unpublished | tried
                for victim in order.victims(busy):
                    if short <= 0:
                        break
                    tried.add(victim)  # freed or busy now: either way not a candidate again in this call
                    victims.append(victim)
                    block = self._blocks.get(victim)
                    short -= len(block.pages) * page if block is not None else 0
            if not victims:
                # Commits the master has not acknowledged are not evictable; a long batch's
                # deferred ones (NOTE [deferred acknowledgement] in mori.umbp.client.pool_client)
                # may be all that is left: one heartbeat acknowledges them, then look again.
                if flushed or self.flush_unpublished is None or not self._unpublished_in(tier):
                    return pool.alloc.available >= need
                flushed = True
                if not self.flush_unpublished():
                    return pool.alloc.available >= need
                continue
            self.evict(victims, [tier] * len(victims))

    def _unpublished_in(self, tier: int) -> bool:
        with self._lock:
            return any((b := self._blocks.get(k)) is not None and b.tier == tier for k in self._unpublished)

    def publish(self, keys: Sequence[str]) -> None:
        """The master acknowledged these commits: every client can see them now."""
        spills = []
        with self._cond:
            self._unpublished.difference_update(keys)
            for key in keys:  # NOTE [direct put]: an accepted conditional commit spills now
                block = self._conditional.pop(key, None)
                if block is not None and self._blocks.get(key) is block and self._pin_for_spill(key, block.size):
                    spills.append(key)
            self._cond.notify_all()
        for key in spills:
            self._submit_spill(key)

    def refuse(self, keys: Sequence[str]) -> None:
        """NOTE [direct put]: the master did not index these ADD-if-absent commits (another node
        holds the keys): drop the blocks, without an event, and mark them for their committers."""
        now = time.monotonic()
        frees: list[tuple[PagePool, list[int]]] = []
        with self._cond:
            for key in keys:
                block = self._conditional.pop(key, None)
                if block is None:
                    continue  # decided before (a resent bundle), or dropped meanwhile
                block.refused = True
                if self._blocks.get(key) is not block:
                    continue
                del self._blocks[key]
                self._orders[block.tier].remove(key)
                self._unpublished.discard(key)
                lease = self._leases.drop(key)
                if lease > now:
                    self._draining.append((lease, self.pools[block.tier], block.pages))
                else:
                    frees.append((self.pools[block.tier], block.pages))
            self._cond.notify_all()
        for pool, pages in frees:
            pool.alloc.free(pages)

    def answered(self, keys: Sequence[str]) -> bool:
        """True when the master answered for every one of ``keys``' commits (acknowledged, or
        refused an ADD-if-absent): none is waiting for a heartbeat."""
        with self._lock:
            return not any(key in self._unpublished for key in keys)

    def unpublished(self) -> list[str]:
        with self._lock:
            return list(self._unpublished)

    def commit(self, slot_id: int, key: str) -> str:
        """'' on success, else why not (the slot expired or names another key)."""
        return self.commit_block(slot_id, key)[0]

    def commit_block(self, slot_id: int, key: str, if_absent: bool = False) -> tuple[str, Block | None]:
        """('', the committed block) or (why not, None). ``if_absent``: an ADD-if-absent whose
        block stays unpublished until the master decides it (NOTE [direct put])."""
        with self._lock:
            slot = self._slots.get(slot_id)
            if slot is None:
                return f"slot {slot_id} is unknown or expired (pending TTL {self.pending_ttl_s:.1f}s)", None
            if slot.key != key:
                return f"slot {slot_id} belongs to key {slot.key!r}, not {key!r}", None
            self._pop_slot(slot_id)
            block = Block(key, slot.pages, slot.size, slot.tier, slot.depth)
            self._blocks[key] = block
            self._orders[slot.tier].add(key, slot.depth)
            self._unpublished.add(key)
            if if_absent:
                self._conditional[key] = block
                self.events.add(ADD_IF_ABSENT, key, slot.tier, slot.size)
                spill = False  # spilled once the master indexed it (publish)
            else:
                self.events.add(ADD, key, slot.tier, slot.size)
                spill = self._pin_for_spill(key, slot.size)
            self._cond.notify_all()
        if spill:
            self._submit_spill(key)
        return "", block

    def abort(self, slot_id: int) -> None:
        with self._cond:
            slot = self._pop_slot(slot_id)
            self._cond.notify_all()
        if slot is not None:
            self.pools[slot.tier].alloc.free(slot.pages)

    def expire_slots(self) -> int:
        """Frees pending slots past their TTL (and demoted pages whose last reader is done)."""
        now = time.monotonic()
        with self._lock:
            dead = [i for i, s in self._slots.items() if s.deadline <= now]
            slots = [slot for slot in map(self._pop_slot, dead) if slot is not None]
            done = [d for d in self._draining if d[0] <= now]
            self._draining = [d for d in self._draining if d[0] > now]
            if slots:
                self._cond.notify_all()
        for slot in slots:
            log.warning(
                "pending slot for key %r expired before its commit: freeing %d pages", slot.key, len(slot.pages)
            )
            self.pools[slot.tier].alloc.free(slot.pages)
        for _, pool, pages in done:
            pool.alloc.free(pages)
        return len(slots)

    # -- get ------------------------------------------------------------------------------------
    def resolve(self, key: str) -> Block | None:
        """The block, with a read lease that keeps eviction off it while a reader copies it."""
        return self.resolve_many([key])[0][1]

    def resolve_many(self, keys: Sequence[str]) -> list[tuple[str, Block | None]]:
        """``resolve`` of each of ``keys`` in order, under one hold of the lock."""
        out: list[tuple[str, Block | None]] = []
        with self._lock:
            now = time.monotonic()  # under the lock: leases are granted in the order they end
            for key in keys:
                block = self._blocks.get(key)
                if block is not None:
                    self._leases.grant(key, now, self.read_lease_s)
                    self._orders[block.tier].touch(key)
                    if len(self._accessed) < ACCESSED_CAP:
                        self._accessed.add(key)
                out.append((key, block))
        return out

    def take_accessed(self) -> list[str]:
        """The keys resolved since the last call, for the master's eviction order."""
        with self._lock:
            keys, self._accessed = list(self._accessed), set()
            return keys

    def read_local(self, key: str, dst: int, size: int, dst_device: int = devmem.HOST) -> bool:
        """Self-target get: from a page tier if the block is there, else straight from its SSD file."""
        with self._lock:
            block = self._blocks.get(key)
            if block is not None:
                self.pools[block.tier].copy_out(block.pages, dst, size, dst_device)
                self._orders[block.tier].touch(key)
                return True
        return self._read_ssd_local(key, dst, size, dst_device)

    # -- evict ----------------------------------------------------------------------------------
    def evict(self, keys: list[str], tiers: Sequence[int] = ()) -> list[tuple[str, int]]:
        """(key, bytes freed in the named tier) per key; 0 for a leased, pinned, moving or unknown
        key, or one not in ``tiers[i]`` (when given). HBM blocks move to DRAM if it has room."""
        now = time.monotonic()
        freed: dict[str, int] = {}
        drops: list[tuple[PagePool, list[int]]] = []
        moves: list[tuple[Block, PagePool, list[int]]] = []
        with self._lock:
            for i, key in enumerate(keys):
                block = self._blocks.get(key)
                busy = self._leases.end(key) > now or key in self._pinned or key in self._moving
                if block is None or busy or (tiers and int(tiers[i]) != block.tier):
                    continue
                pool = self.pools[block.tier]
                freed[key] = len(block.pages) * pool.page_size
                target = self.pool(DEMOTE_TO.get(block.tier, -1))
                pages = target.alloc.alloc(block.size) if target is not None else None
                if target is not None and pages is not None:
                    self._moving.add(key)
                    moves.append((block, target, pages))
                    continue
                del self._blocks[key]
                self._orders[block.tier].remove(key)
                self._leases.drop(key)
                self._unpublished.discard(key)
                self._conditional.pop(key, None)
                self.events.add(REMOVE, key, block.tier, block.size)
                drops.append((pool, block.pages))
            self._cond.notify_all()
        for pool, pages in drops:
            pool.alloc.free(pages)
        for block, target, pages in moves:
            if not self._demote(block, target, pages):
                freed.pop(block.key, None)
        return [(key, freed.get(key, 0)) for key in keys]

    def _demote(self, block: Block, target: PagePool, pages: list[int]) -> bool:
        """See NOTE [HBM demotion]. False if the copy failed (the block stays) or clear() dropped it."""
        source = self.pools[block.tier]
        try:
            staging = np.empty(block.size, np.uint8)
            source.copy_out(block.pages, int(staging.ctypes.data), block.size)
            target.copy_in(pages, int(staging.ctypes.data), block.size)
        except Exception:
            log.exception("demoting %r from %s failed: it stays there", block.key, UMBPTierType(block.tier).name)
            with self._lock:
                self._moving.discard(block.key)
            target.alloc.free(pages)
            return False
        now = time.monotonic()
        with self._lock:
            self._moving.discard(block.key)
            if self._blocks.get(block.key) is not block:  # clear() dropped it meanwhile (and its pages)
                target.alloc.free(pages)
                return False
            self._blocks[block.key] = Block(block.key, pages, block.size, target.tier, block.depth)
            self._orders[block.tier].remove(block.key)
            self._orders[target.tier].add_oldest(block.key, block.depth)  # it keeps its last access time
            self.events.add(REMOVE, block.key, block.tier, block.size)
            self.events.add(ADD, block.key, target.tier, block.size)
            lease = self._leases.end(block.key)
            if lease > now:  # a reader resolved the old pages during the copy
                self._draining.append((lease, source, block.pages))
                return True
        source.alloc.free(block.pages)
        return True

    def clear(self) -> int:
        """Drops every committed block of every tier (SSD too), REMOVE events included; pages a
        reader still holds a lease on are freed when it ends. Returns the blocks dropped."""
        now = time.monotonic()
        frees: list[tuple[PagePool, list[int]]] = []
        with self._lock:
            blocks = list(self._blocks.values())
            self._blocks.clear()
            for order in self._orders.values():
                order.clear()
            self._unpublished.clear()
            self._conditional.clear()
            self._cond.notify_all()
            for b in blocks:
                self.events.add(REMOVE, b.key, b.tier, b.size)
                lease = self._leases.drop(b.key)
                if lease > now:
                    self._draining.append((lease, self.pools[b.tier], b.pages))
                else:
                    frees.append((self.pools[b.tier], b.pages))
            dropped = len(blocks) + self._clear_ssd_locked()
        for pool, pages in frees:
            pool.alloc.free(pages)
        return dropped

    # -- snapshot --------------------------------------------------------------------------------
    def full_sync(self) -> tuple[int, list[Event]]:
        # Lock order store -> event log, as in commit and evict.
        with self._lock:
            return self.events.full_sync(self._snapshot)

    def _snapshot(self) -> list[Event]:
        events = [(ADD, b.key, b.tier, b.size) for b in self._blocks.values()]
        if self.ssd is not None:
            events += [(ADD, key, int(UMBPTierType.SSD), size) for key, size in self.ssd.entries()]
        return events

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._blocks)

    def tiers(self) -> dict[str, int]:
        """key -> the page tier its block is in."""
        with self._lock:
            return {k: b.tier for k, b in self._blocks.items()}

    # -- local fast path ------------------------------------------------------------------------
    def copy_in(self, tier: int, pages: list[int], src: int, size: int, src_device: int = devmem.HOST) -> None:
        """Self-target put: a copy into our own pages, no transfer."""
        self.pools[tier].copy_in(pages, src, size, src_device)

    def close(self, engine: IOEngine) -> None:
        self._close_ssd(engine)
        for pool in self.pools.values():
            pool.close(engine)
