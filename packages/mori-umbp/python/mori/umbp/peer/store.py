# SPDX-License-Identifier: MIT
"""The blocks a peer owns: one DRAM buffer registered with mori-io, pending slots and committed
blocks, read leases, and the event log that feeds the master.

A put is two-phase: ``allocate`` reserves pages under a pending slot (invisible to everyone),
the writer fills them with mori-io, ``commit`` makes the key visible by queueing an ADD event.
A slot not committed within UMBP_PENDING_SLOT_TTL_MS is freed, so a writer that dies mid-put
leaves neither a visible key nor leaked pages.

With an SSD tier, a commit also queues the block for "spill by copy": the spill worker copies it
into the tier and queues an ADD for tier SSD, so the master's index holds both locations and
routes reads to DRAM while the block is there, to SSD once DRAM evicted it. A block waiting for
its copy is pinned: DRAM eviction skips it, so the copy never reads reused pages.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mori.io import IOEngine, MemoryDesc, MemoryLocationType
from mori.umbp.errors import TierCapacityError
from mori.umbp.peer.allocator import PageAllocator
from mori.umbp.peer.events import ADD, REMOVE, Event, EventLog
from mori.umbp.peer.spill import SpillWorker
from mori.umbp.peer.ssd import SsdTier
from mori.umbp.peer.ssd_staging import SsdStaging
from mori.umbp.types import UMBPTierType

log = logging.getLogger(__name__)


class PeerBusy(Exception):
    """A transient shortage on the peer (every SSD staging slot leased): retry, it is no miss."""


@dataclass
class Block:
    key: str
    pages: list[int]
    size: int
    tier: int
    depth: int = -1


@dataclass
class Slot:
    key: str
    pages: list[int]
    size: int
    tier: int
    deadline: float
    depth: int = -1


@dataclass(frozen=True)
class StagedRead:
    """An SSD block copied into staging slot ``slot`` under lease ``lease_id``."""

    lease_id: int
    slot: int
    size: int


class PeerStore:
    def __init__(
        self, engine: IOEngine, capacity: int, page_size: int, pending_ttl_s: float, read_lease_s: float
    ) -> None:
        self.alloc = PageAllocator(capacity, page_size)
        self.page_size = page_size
        # The pool's bytes: owned here, written and read by remote engines through mori-io.
        self.buffer = np.zeros(max(self.alloc.capacity, 1), dtype=np.uint8)
        self.desc: MemoryDesc | None = None
        if self.alloc.capacity:
            self.desc = engine.register_memory(self.buffer.ctypes.data, self.alloc.capacity, -1, MemoryLocationType.CPU)
        self.events = EventLog()
        self.pending_ttl_s = pending_ttl_s
        self.read_lease_s = read_lease_s
        self._lock = threading.Lock()
        self._slots: dict[int, Slot] = {}
        self._blocks: dict[str, Block] = {}
        self._leases: dict[str, float] = {}
        self._ids = itertools.count(1)
        self.ssd: SsdTier | None = None
        self.staging: SsdStaging | None = None
        self._spill: SpillWorker | None = None
        self._pinned: set[str] = set()
        self._on_spilled: Callable[[], None] = lambda: None

    def enable_ssd(self, ssd: SsdTier, staging: SsdStaging, on_spilled: Callable[[], None]) -> None:
        """Adds the SSD tier; ``on_spilled`` runs after each copy (it wakes the heartbeat)."""
        self.ssd, self.staging, self._on_spilled = ssd, staging, on_spilled
        self._spill = SpillWorker(self._spill_one)

    # -- capacity -------------------------------------------------------------------------------
    def capacities(self) -> dict[int, tuple[int, int]]:
        caps: dict[int, tuple[int, int]] = {}
        if self.alloc.capacity:
            caps[int(UMBPTierType.DRAM)] = (self.alloc.capacity, self.alloc.available)
        if self.ssd is not None:
            caps[int(UMBPTierType.SSD)] = (self.ssd.capacity, self.ssd.capacity - self.ssd.used)
        return caps

    # -- put ------------------------------------------------------------------------------------
    def allocate(self, key: str, size: int, tier: int, depth: int = -1) -> tuple[str, int, list[int]]:
        """("ALLOCATED", slot id, pages), ("EXISTS", 0, []) or ("NO_SPACE", 0, [])."""
        self.expire_slots()
        with self._lock:
            if key in self._blocks or any(s.key == key for s in self._slots.values()):
                return "EXISTS", 0, []  # peer-side dedup: the master's index may lag
            pages = self.alloc.alloc(size)
            if pages is None:
                return "NO_SPACE", 0, []
            slot_id = next(self._ids)
            self._slots[slot_id] = Slot(key, pages, size, tier, time.monotonic() + self.pending_ttl_s, depth)
            return "ALLOCATED", slot_id, pages

    def commit(self, slot_id: int, key: str) -> str:
        """'' on success, else why not (the slot expired or names another key)."""
        with self._lock:
            slot = self._slots.get(slot_id)
            if slot is None:
                return f"slot {slot_id} is unknown or expired (pending TTL {self.pending_ttl_s:.1f}s)"
            if slot.key != key:
                return f"slot {slot_id} belongs to key {slot.key!r}, not {key!r}"
            del self._slots[slot_id]
            self._blocks[key] = Block(key, slot.pages, slot.size, slot.tier, slot.depth)
            self.events.add(ADD, key, slot.tier, slot.size)
            spill = self._spill is not None and self._spillable(key, slot.size)
            if spill:
                self._pinned.add(key)
        if spill and self._spill is not None:
            self._spill.submit(key)
        return ""

    def abort(self, slot_id: int) -> None:
        with self._lock:
            slot = self._slots.pop(slot_id, None)
        if slot is not None:
            self.alloc.free(slot.pages)

    def expire_slots(self) -> int:
        now = time.monotonic()
        with self._lock:
            dead = [i for i, s in self._slots.items() if s.deadline <= now]
            slots = [self._slots.pop(i) for i in dead]
        for slot in slots:
            log.warning(
                "pending slot for key %r expired before its commit: freeing %d pages", slot.key, len(slot.pages)
            )
            self.alloc.free(slot.pages)
        return len(slots)

    # -- get, evict ------------------------------------------------------------------------------
    def resolve(self, key: str) -> Block | None:
        """The block, with a read lease that keeps eviction off it while a reader copies it."""
        with self._lock:
            block = self._blocks.get(key)
            if block is not None:
                self._leases[key] = time.monotonic() + self.read_lease_s
            return block

    def evict(self, keys: list[str]) -> list[tuple[str, int]]:
        """(key, bytes freed) per key; 0 for a leased, pending or unknown key."""
        now = time.monotonic()
        out: list[tuple[str, int]] = []
        freed: list[list[int]] = []
        with self._lock:
            for key in keys:
                block = self._blocks.get(key)
                if block is None or self._leases.get(key, 0.0) > now or key in self._pinned:
                    out.append((key, 0))
                    continue
                del self._blocks[key]
                self._leases.pop(key, None)
                self.events.add(REMOVE, key, block.tier, block.size)
                freed.append(block.pages)
                out.append((key, len(block.pages) * self.page_size))
        for pages in freed:
            self.alloc.free(pages)
        return out

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

    # -- SSD tier --------------------------------------------------------------------------------
    def _spillable(self, key: str, size: int) -> bool:
        # A block larger than a staging slot could never be read back by a remote peer, and one
        # larger than the tier never fits: keep such blocks in DRAM only.
        assert self.ssd is not None and self.staging is not None
        if size > self.staging.slot_size or size > self.ssd.capacity:
            log.info("block %r (%d bytes) is not spilled: larger than an SSD staging slot or the tier", key, size)
            return False
        return True

    def _spill_one(self, key: str) -> None:
        """Runs on the spill worker: copy the pinned DRAM block to SSD, then queue its events."""
        assert self.ssd is not None
        with self._lock:
            block = self._blocks.get(key)
            if block is None:
                self._pinned.discard(key)
                return
            data = bytearray(block.size)
            self.copy_out(block.pages, ctypes.addressof(ctypes.c_char.from_buffer(data)), block.size)
            self._pinned.discard(key)  # the bytes are copied: DRAM may evict it from now on
        try:
            evicted = self.ssd.put(key, data, block.depth)
        except TierCapacityError as exc:
            log.warning("spill of %r skipped: %s", key, exc)
            return
        with self._lock:  # lock order store -> event log, as everywhere
            for gone, size in evicted:
                self.events.add(REMOVE, gone, int(UMBPTierType.SSD), size)
            self.events.add(ADD, key, int(UMBPTierType.SSD), block.size)
        self._on_spilled()

    def drain_spills(self, timeout_s: float) -> bool:
        """True once every queued spill has run; True at once without an SSD tier."""
        return self._spill.drain(timeout_s) if self._spill is not None else True

    def ssd_keys(self) -> list[str]:
        return [] if self.ssd is None else [k for k, _ in self.ssd.entries()]

    def stage_ssd(self, key: str) -> StagedRead | None:
        """Copies an SSD block into a leased staging slot for a remote reader. None when the
        block is not on SSD; PeerBusy when every slot is leased (transient, not a miss)."""
        if self.ssd is None or self.staging is None:
            return None
        size = self.ssd.size_of(key)
        if size is None:
            return None
        got = self.staging.acquire()
        if got is None:
            raise PeerBusy(f"all {len(self.staging.buffer) // self.staging.slot_size} SSD staging slots are leased")
        lease_id, slot = got
        try:
            if not self.ssd.read_into(key, self.staging.address(slot), size):
                self.staging.release(lease_id)
                return None  # evicted from SSD between the two calls
        except Exception:
            self.staging.release(lease_id)
            raise
        return StagedRead(lease_id, slot, size)

    def release_ssd(self, lease_id: int) -> bool:
        return self.staging.release(lease_id) if self.staging is not None else False

    def read_local(self, key: str, dst: int, size: int) -> bool:
        """Self-target get: DRAM if the block is there, else straight from the SSD file."""
        with self._lock:
            block = self._blocks.get(key)
            if block is not None:
                self.copy_out(block.pages, dst, size)
                return True
        return self.ssd is not None and self.ssd.read_into(key, dst, size)

    # -- local fast path ------------------------------------------------------------------------
    def copy_in(self, pages: list[int], src: int, size: int) -> None:
        """Self-target put: a memcpy into our own pages, no transfer."""
        for i, page in enumerate(pages):
            n = min(self.page_size, size - i * self.page_size)
            ctypes.memmove(self.buffer.ctypes.data + page * self.page_size, src + i * self.page_size, n)

    def copy_out(self, pages: list[int], dst: int, size: int) -> None:
        for i, page in enumerate(pages):
            n = min(self.page_size, size - i * self.page_size)
            ctypes.memmove(dst + i * self.page_size, self.buffer.ctypes.data + page * self.page_size, n)

    def close(self, engine: IOEngine) -> None:
        if self._spill is not None:
            self._spill.stop()
        if self.ssd is not None:
            self.ssd.close()
        if self.staging is not None:
            self.staging.close(engine)
        if self.desc is not None:
            engine.deregister_memory(self.desc)
            self.desc = None
