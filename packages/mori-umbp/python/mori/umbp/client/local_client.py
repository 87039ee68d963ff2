# SPDX-License-Identifier: MIT
"""``LocalClient``: MORI's local mode (StandaloneClient), in process, no network, no master.

Blocks live in a DRAM tier of pages (``dram.capacity_bytes`` in ``dram.page_size`` pages) and,
with ``ssd.enabled``, an SSD tier of block files in ``ssd.storage_dir``. The client keeps its own
index and its own eviction order over its DRAM blocks (``eviction.policy``: ``lru``, or
``prefix_aware_lru``, which drops the deepest block of the ``candidate_window`` least recently
used first, so a prompt's chain loses its tail before its head). A put that finds DRAM full
demotes victims to SSD (dropped without an SSD tier) until the block fits, and a put that leaves
DRAM above ``dram.high_watermark`` demotes down to ``dram.low_watermark``. A get served from SSD
copies the block back into DRAM when ``eviction.auto_promote_on_read`` is on. The SSD tier
evicts by its own capacity and watermarks, with the same policy, and keeps its files across
restarts (``ssd.recover``).
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mori.umbp import devmem
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.config import UMBPConfig, UMBPDeploymentMode
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch
from mori.umbp.errors import ConfigError, InvalidArgumentError, TierCapacityError
from mori.umbp.peer.lru import EvictionOrder
from mori.umbp.peer.pools import HostPagePool
from mori.umbp.peer.ssd import SsdTier
from mori.umbp.types import UMBPTierType

log = logging.getLogger(__name__)


@dataclass
class LocalBlock:
    pages: list[int]
    size: int
    depth: int


def _check_config(config: UMBPConfig) -> None:
    dram = config.dram
    if dram.capacity_bytes < dram.page_size or dram.page_size < 4096:
        raise ConfigError(
            f"dram.capacity_bytes={dram.capacity_bytes} must hold at least one page of "
            f"dram.page_size={dram.page_size} (>= 4096) in the local mode"
        )
    if not 0 < dram.low_watermark < dram.high_watermark <= 1:
        raise ConfigError(
            f"dram watermarks low={dram.low_watermark}, high={dram.high_watermark} must satisfy 0 < low < high <= 1"
        )
    if config.hbm.capacity_bytes:
        raise ConfigError(
            f"hbm.capacity_bytes={config.hbm.capacity_bytes}: the local mode has DRAM and SSD tiers only "
            "(HBM pages belong to distributed nodes)"
        )


class LocalClient(UMBPClient):
    """MORI's ``UMBPClient`` API over in-process tiers."""

    def __init__(self, config: UMBPConfig | None = None) -> None:
        super().__init__(config)
        config = config if config is not None else UMBPConfig.from_environment(distributed=False)
        _check_config(config)
        self.config = config
        ev = config.eviction
        self._order = EvictionOrder(ev.policy, ev.candidate_window)  # checks the policy first
        ssd = config.ssd
        self.ssd = (
            SsdTier(
                Path(ssd.storage_dir),
                ssd.capacity_bytes,
                ssd.high_watermark,
                ssd.low_watermark,
                ev.policy,
                ev.candidate_window,
                ssd.recover,
            )
            if ssd.enabled
            else None
        )
        self._pool = HostPagePool(None, config.dram.capacity_bytes, config.dram.page_size)
        self._high = int(config.dram.high_watermark * self._pool.capacity)
        self._low = int(config.dram.low_watermark * self._pool.capacity)
        self._promote = ev.auto_promote_on_read
        self._blocks: dict[str, LocalBlock] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        ssd = f", ssd={str(self.ssd.dir)!r}" if self.ssd is not None else ""
        return f"UMBPClient(mode=Local, dram={self._pool.capacity}{ssd})"

    def get_deployment_mode(self) -> UMBPDeploymentMode:
        return UMBPDeploymentMode.Local

    # -- tiers (under the lock) ------------------------------------------------------------------
    def _used(self) -> int:
        return self._pool.capacity - self._pool.alloc.available

    def _demote(self, key: str) -> None:
        """Moves a DRAM block to SSD (drops it without an SSD tier, or if SSD cannot hold it)."""
        block = self._blocks.pop(key)
        self._order.remove(key)
        if self.ssd is not None:
            data = bytearray(block.size)
            self._pool.copy_out(block.pages, ctypes.addressof(ctypes.c_char.from_buffer(data)), block.size)
            try:
                self.ssd.put(key, data, block.depth)
            except TierCapacityError as exc:
                log.info("demoting %r: %s; dropped", key, exc)
        self._pool.alloc.free(block.pages)

    def _room_for(self, size: int) -> list[int] | None:
        """Pages for ``size`` bytes, demoting victims until they are free; None if it cannot fit."""
        if self._pool.alloc.pages_for(size) > self._pool.alloc.num_pages:
            return None
        while (pages := self._pool.alloc.alloc(size)) is None:
            victim = self._order.victim()
            if victim is None:
                return None
            self._demote(victim)
        return pages

    def _insert(self, key: str, src: int, size: int, depth: int, device: int) -> bool:
        pages = self._room_for(size)
        if pages is None:
            return False
        self._pool.copy_in(pages, src, size, device)
        self._blocks[key] = LocalBlock(pages, size, depth)
        self._order.add(key, depth)
        if self._used() > self._high:
            while self._used() > self._low:
                victim = self._order.victim(frozenset({key}))
                if victim is None:
                    break
                self._demote(victim)
        return True

    # -- data -----------------------------------------------------------------------------------
    def _put_batch(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int], devs: list[int]
    ) -> list[bool]:
        out = []
        with self._lock:
            for key, ptr, size, depth, dev in zip(keys, ptrs, sizes, depths, devs, strict=True):
                if key in self._blocks or (self.ssd is not None and key in self.ssd):
                    out.append(True)  # first writer wins
                    continue
                out.append(self._insert(key, ptr, size, depth, dev))
        return out

    def _get_batch(self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], devs: list[int]) -> list[bool]:
        with self._lock:
            return [self._get(k, p, s, d) for k, p, s, d in zip(keys, ptrs, sizes, devs, strict=True)]

    def _get(self, key: str, ptr: int, size: int, dev: int) -> bool:
        block = self._blocks.get(key)
        if block is not None:
            if block.size != size:
                raise InvalidArgumentError(f"size={size} but block {key!r} holds {block.size} bytes")
            self._pool.copy_out(block.pages, ptr, size, dev)
            self._order.touch(key)
            return True
        if self.ssd is None:
            return False
        host = bytearray(size)  # a file reads into host memory; promotion copies from there too
        addr = ctypes.addressof(ctypes.c_char.from_buffer(host))
        if not self.ssd.read_into(key, addr, size):
            return False
        devmem.copy(ptr, dev, addr, devmem.HOST, size)
        if self._promote:
            self._insert(key, addr, size, self.ssd.depth_of(key), devmem.HOST)
        return True

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        """A pure probe: no LRU bump."""
        self._live()
        with self._lock:
            return [k in self._blocks or (self.ssd is not None and k in self.ssd) for k in keys]

    def keys_by_tier(self) -> dict[str, list[str]]:
        """{"DRAM": [...], "SSD": [...]}: the keys each tier holds, sorted."""
        with self._lock:
            ssd = sorted(k for k, _ in self.ssd.entries()) if self.ssd is not None else []
            return {"DRAM": sorted(self._blocks), "SSD": ssd}

    def clear(self) -> bool:
        self._live()
        with self._lock:
            for key in list(self._blocks):
                block = self._blocks.pop(key)
                self._order.remove(key)
                self._pool.alloc.free(block.pages)
            if self.ssd is not None:
                self.ssd.clear()
        return True

    def flush(self) -> bool:
        """Nothing is pending: SSD writes finish inside the call that makes them."""
        self._live()
        return True

    # -- external KV: the local mode has no master ---------------------------------------------------
    def report_external_kv_blocks(self, hashes: Sequence[str], tier: UMBPTierType) -> bool:
        return False

    def revoke_external_kv_blocks(self, hashes: Sequence[str], tier: UMBPTierType) -> bool:
        return False

    def revoke_all_external_kv_blocks_at_tier(self, tier: UMBPTierType) -> bool:
        return False

    def match_external_kv(self, hashes: Sequence[str], count_as_hit: bool = False) -> list[UMBPExternalKvMatch]:
        return []

    def get_external_kv_hit_counts(self, hashes: Sequence[str]) -> list[UMBPExternalKvHitCountEntry]:
        return []

    def close(self) -> None:
        """Releases the DRAM tier; the SSD tier keeps its files when ``ssd.recover`` is on. Idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._blocks.clear()
            if self.ssd is not None:
                self.ssd.close()
