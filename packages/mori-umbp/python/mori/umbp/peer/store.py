# SPDX-License-Identifier: MIT
"""The blocks a peer owns: one DRAM buffer registered with mori-io, pending slots and committed
blocks, read leases, and the event log that feeds the master.

A put is two-phase: ``allocate`` reserves pages under a pending slot (invisible to everyone),
the writer fills them with mori-io, ``commit`` makes the key visible by queueing an ADD event.
A slot not committed within UMBP_PENDING_SLOT_TTL_MS is freed, so a writer that dies mid-put
leaves neither a visible key nor leaked pages.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import threading
import time
from dataclasses import dataclass

import numpy as np

from mori.io import IOEngine, MemoryDesc, MemoryLocationType
from mori.umbp.peer.allocator import PageAllocator
from mori.umbp.peer.events import ADD, REMOVE, Event, EventLog
from mori.umbp.types import UMBPTierType

log = logging.getLogger(__name__)


@dataclass
class Block:
    key: str
    pages: list[int]
    size: int
    tier: int


@dataclass
class Slot:
    key: str
    pages: list[int]
    size: int
    tier: int
    deadline: float


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

    # -- capacity -------------------------------------------------------------------------------
    def capacities(self) -> dict[int, tuple[int, int]]:
        if not self.alloc.capacity:
            return {}
        return {int(UMBPTierType.DRAM): (self.alloc.capacity, self.alloc.available)}

    # -- put ------------------------------------------------------------------------------------
    def allocate(self, key: str, size: int, tier: int) -> tuple[str, int, list[int]]:
        """("ALLOCATED", slot id, pages), ("EXISTS", 0, []) or ("NO_SPACE", 0, [])."""
        self.expire_slots()
        with self._lock:
            if key in self._blocks or any(s.key == key for s in self._slots.values()):
                return "EXISTS", 0, []  # peer-side dedup: the master's index may lag
            pages = self.alloc.alloc(size)
            if pages is None:
                return "NO_SPACE", 0, []
            slot_id = next(self._ids)
            self._slots[slot_id] = Slot(key, pages, size, tier, time.monotonic() + self.pending_ttl_s)
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
            self._blocks[key] = Block(key, slot.pages, slot.size, slot.tier)
            self.events.add(ADD, key, slot.tier, slot.size)
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
                if block is None or self._leases.get(key, 0.0) > now:
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
            return self.events.full_sync(lambda: [(ADD, b.key, b.tier, b.size) for b in self._blocks.values()])

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._blocks)

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
        if self.desc is not None:
            engine.deregister_memory(self.desc)
            self.desc = None
