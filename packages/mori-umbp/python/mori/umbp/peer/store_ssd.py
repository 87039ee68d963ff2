# SPDX-License-Identifier: MIT
"""The SSD side of ``PeerStore``: "spill by copy after commit", staged reads, local reads.

With an SSD tier, a commit (HBM or DRAM) also queues the block for the spill worker, which copies
it into the tier and queues an ADD for tier SSD, so the master's index holds both locations and
routes reads to the page tier while the block is there, to SSD once it was evicted. A block
waiting for its copy is pinned: eviction skips it, so the copy never reads reused pages.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mori.io import IOEngine
from mori.umbp import devmem
from mori.umbp.errors import TierCapacityError
from mori.umbp.peer.events import ADD, REMOVE, EventLog
from mori.umbp.peer.spill import SpillWorker
from mori.umbp.peer.ssd import SsdTier
from mori.umbp.peer.ssd_staging import SsdStaging
from mori.umbp.types import UMBPTierType

if TYPE_CHECKING:
    from mori.umbp.peer.pools import PagePool

log = logging.getLogger(__name__)
SSD = int(UMBPTierType.SSD)


class PeerBusy(Exception):
    """A transient shortage on the peer (every SSD staging slot leased): retry, it is no miss."""


@dataclass(frozen=True)
class StagedRead:
    """An SSD block copied into staging slot ``slot`` under lease ``lease_id``."""

    lease_id: int
    slot: int
    size: int


class SsdSide:
    # Shared with PeerStore, which owns them (lock order: store -> event log).
    _lock: threading.Lock
    _blocks: dict[str, Any]
    pools: dict[int, PagePool]
    events: EventLog

    def __init__(self) -> None:
        self.ssd: SsdTier | None = None
        self.staging: SsdStaging | None = None
        self._spill: SpillWorker | None = None
        self._pinned: set[str] = set()
        self._on_spilled: Callable[[], None] = lambda: None

    def enable_ssd(self, ssd: SsdTier, staging: SsdStaging, on_spilled: Callable[[], None]) -> None:
        """Adds the SSD tier; ``on_spilled`` runs after each copy (it wakes the heartbeat)."""
        self.ssd, self.staging, self._on_spilled = ssd, staging, on_spilled
        self._spill = SpillWorker(self._spill_one)

    def _pin_for_spill(self, key: str, size: int) -> bool:
        """Under the store lock, at commit: pins ``key`` if it is to be spilled."""
        if self._spill is None or self.ssd is None or self.staging is None:
            return False
        # A block larger than a staging slot could never be read back by a remote peer, and one
        # larger than the tier never fits: keep such blocks in their page tier only.
        if size > self.staging.slot_size or size > self.ssd.capacity:
            log.info("block %r (%d bytes) is not spilled: larger than an SSD staging slot or the tier", key, size)
            return False
        self._pinned.add(key)
        return True

    def _submit_spill(self, key: str) -> None:
        if self._spill is not None:
            self._spill.submit(key)

    def _spill_one(self, key: str) -> None:
        """Runs on the spill worker: copy the pinned block to SSD, then queue its events."""
        assert self.ssd is not None
        with self._lock:
            block = self._blocks.get(key)
            if block is None:
                self._pinned.discard(key)
                return
            data = bytearray(block.size)
            self.pools[block.tier].copy_out(block.pages, ctypes.addressof(ctypes.c_char.from_buffer(data)), block.size)
            self._pinned.discard(key)  # the bytes are copied: eviction may take it from now on
        try:
            evicted = self.ssd.put(key, data, block.depth)
        except TierCapacityError as exc:
            log.warning("spill of %r skipped: %s", key, exc)
            return
        with self._lock:  # lock order store -> event log, as everywhere
            for gone, size in evicted:
                self.events.add(REMOVE, gone, SSD, size)
            self.events.add(ADD, key, SSD, block.size)
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

    def _read_ssd_local(self, key: str, dst: int, size: int, dst_device: int) -> bool:
        if self.ssd is None:
            return False
        if dst_device == devmem.HOST:
            return self.ssd.read_into(key, dst, size)
        host = bytearray(size)  # a file reads into host memory; the GPU copy follows
        addr = ctypes.addressof(ctypes.c_char.from_buffer(host))
        if not self.ssd.read_into(key, addr, size):
            return False
        devmem.copy(dst, dst_device, addr, devmem.HOST, size)
        return True

    def _clear_ssd_locked(self) -> int:
        """Under the store lock: drops every SSD block and queues its REMOVE."""
        if self.ssd is None:
            return 0
        gone = self.ssd.clear()
        for key, size in gone:
            self.events.add(REMOVE, key, SSD, size)
        return len(gone)

    def _close_ssd(self, engine: IOEngine) -> None:
        if self._spill is not None:
            self._spill.stop()
        if self.ssd is not None:
            self.ssd.close()
        if self.staging is not None:
            self.staging.close(engine)
