# SPDX-License-Identifier: MIT
"""``LocalClient``: MORI's local mode (StandaloneClient), in process, no network, no master.

Blocks live in a DRAM tier (``dram.capacity_bytes`` in ``dram.page_size`` pages, blocks packed
within pages: see ``peer/packed.py``; memory as ``dram.use_hugepages`` / ``numa_node`` /
``prefault`` say) and,
with ``ssd.enabled``, an SSD tier of block files in ``ssd.storage_dir``. The client keeps its own
index and its own eviction order over its DRAM blocks (``eviction.policy``: ``lru``, or
``prefix_aware_lru``, which drops the deepest block of the ``candidate_window`` least recently
used first, so a prompt's chain loses its tail before its head). A put that finds DRAM full
demotes victims to SSD (dropped without an SSD tier) until the block fits, and a put that leaves
DRAM above ``dram.high_watermark`` demotes down to ``dram.low_watermark``. A get served from SSD
copies the block back into DRAM when ``eviction.auto_promote_on_read`` is on. The SSD tier
evicts by its own capacity and watermarks, with the same policy, and keeps its files across
restarts (``ssd.recover``).

MORI's shared-SSD roles (``config.resolve_role()``): a ``SharedSSDLeader`` writes every block it
stores through to its SSD tier as well, so other processes can read it from ``ssd.storage_dir``; a
``SharedSSDFollower`` owns no SSD tier, stores nothing (its puts answer False, as MORI's do) and
serves gets from its DRAM, then from the leader's files there (``peer/ssd_shared.py``), copying a
hit into its DRAM when ``eviction.auto_promote_on_read`` is on.

NOTE [batch results]: a batch put never evicts a block it named (put or found) from DRAM when
that would lose it (no SSD tier to demote to): the put that finds no other room answers False
instead. With an SSD tier a same-batch block may be demoted; if SSD could not take it or has
evicted it since, its put's answer turns False. So every True of a batch is a block a get finds
right after.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from mori.umbp import devmem
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.config import UMBPConfig, UMBPDeploymentMode, UMBPRole
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch
from mori.umbp.errors import ConfigError, InvalidArgumentError, PeerUnavailableError, TierCapacityError
from mori.umbp.peer.lru import EvictionOrder
from mori.umbp.peer.packed import ALIGN, PackedAllocator, PackedHostPool
from mori.umbp.peer.pools import host_memory
from mori.umbp.peer.ssd import SsdTier
from mori.umbp.peer.ssd_shared import SharedSsdReader
from mori.umbp.types import UMBPTierType

log = logging.getLogger(__name__)


@dataclass
class LocalBlock:
    pages: list[tuple[int, int]]  # PackedAllocator extents
    size: int
    depth: int


def _check_config(config: UMBPConfig) -> None:
    dram = config.dram
    if dram.capacity_bytes < dram.page_size or dram.page_size < 4096 or dram.page_size % ALIGN:
        raise ConfigError(
            f"dram.capacity_bytes={dram.capacity_bytes} must hold at least one page of "
            f"dram.page_size={dram.page_size} (>= 4096, a multiple of {ALIGN}) in the local mode"
        )
    if not 0 < dram.low_watermark < dram.high_watermark <= 1:
        raise ConfigError(
            f"dram watermarks low={dram.low_watermark}, high={dram.high_watermark} must satisfy 0 < low < high <= 1"
        )
    role = config.resolve_role()
    if role != UMBPRole.Standalone and not config.ssd.enabled:
        raise ConfigError(
            f"role={role.name} shares blocks through ssd.storage_dir={config.ssd.storage_dir!r}: it needs "
            "ssd.enabled=True"
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
        config = self._accepted_config(config, distributed=False, check=_check_config)
        self.config = config
        ev = config.eviction
        self._order = EvictionOrder(ev.policy, ev.candidate_window)  # checks the policy first
        ssd = config.ssd
        self.role = config.resolve_role()
        follower = self.role == UMBPRole.SharedSSDFollower
        #: The leader's files a follower reads (None in the other roles).
        self.shared = SharedSsdReader(Path(ssd.storage_dir)) if follower else None
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
            if ssd.enabled and not follower
            else None
        )
        self._pool = PackedHostPool(config.dram.capacity_bytes, config.dram.page_size, host_memory(config.dram))
        self._alloc: PackedAllocator = self._pool.alloc
        self._high = int(config.dram.high_watermark * self._pool.capacity)
        self._low = int(config.dram.low_watermark * self._pool.capacity)
        self._promote = ev.auto_promote_on_read
        self._blocks: dict[str, LocalBlock] = {}
        self._lock = threading.Lock()
        self._batch: set[str] = set()  # keys the batch being put has put (or found) so far, and its current one

    def __repr__(self) -> str:
        ssd = f", ssd={str(self.ssd.dir)!r}" if self.ssd is not None else ""
        role = f", role={self.role.name}" if self.role != UMBPRole.Standalone else ""
        shared = f", shared_ssd={str(self.shared.dir)!r}" if self.shared is not None else ""
        return f"UMBPClient(mode=Local, dram={self._pool.capacity}{ssd}{shared}{role})"

    def get_deployment_mode(self) -> UMBPDeploymentMode:
        return UMBPDeploymentMode.Local

    # -- tiers (under the lock) ------------------------------------------------------------------
    def _used(self) -> int:
        return self._pool.capacity - self._alloc.available

    def _demote(self, key: str) -> bool:
        """Moves a DRAM block to SSD (drops it without an SSD tier, or if SSD cannot hold it);
        True if it is readable from SSD now."""
        block = self._blocks.pop(key)
        self._order.remove(key)
        kept = False
        if self.ssd is not None:
            data = bytearray(block.size)
            self._pool.copy_out(block.pages, ctypes.addressof(ctypes.c_char.from_buffer(data)), block.size)
            try:
                self.ssd.put(key, data, block.depth)
                kept = True
            except TierCapacityError as exc:
                log.info("demoting %r: %s; dropped", key, exc)
        self._alloc.free(block.pages)
        return kept

    def _write_through(self, key: str) -> None:
        """The leader's copy of a new DRAM block into its SSD tier, where followers read it. Best
        effort, as MORI's copy pipeline: the block stays in DRAM if the SSD cannot take it."""
        assert self.ssd is not None
        block = self._blocks[key]
        data = bytearray(block.size)
        self._pool.copy_out(block.pages, ctypes.addressof(ctypes.c_char.from_buffer(data)), block.size)
        try:
            self.ssd.put(key, data, block.depth)
        except (TierCapacityError, PeerUnavailableError) as exc:
            log.warning("shared-SSD leader: %r stays DRAM-only, followers will miss it: %s", key, exc)

    def _holds(self, key: str) -> bool:
        return key in self._blocks or (self.ssd is not None and key in self.ssd)

    def _protected(self, key: str) -> AbstractSet[str]:
        """Keys eviction must skip now: ``key`` itself, and without an SSD tier every key this
        batch named (see NOTE [batch results])."""
        if self.ssd is not None:
            return {key}
        return self._batch if key in self._batch else self._batch | {key}

    def _victim(self, key: str) -> str | None:
        """The next block to demote for ``key``'s sake, None when every block is protected."""
        if self.ssd is None and key in self._batch:
            # Every batch key is in DRAM (none is evicted without SSD): skip a futile full scan.
            batch_blocks = len(self._batch) - (key not in self._blocks)
            if len(self._blocks) <= batch_blocks:
                return None
        return self._order.victim(self._protected(key))

    def _room_for(self, key: str, size: int) -> list[tuple[int, int]] | None:
        """Extents for ``size`` bytes, demoting victims until they are free; None if it cannot fit."""
        if self._alloc.footprint(size) > self._pool.capacity:
            return None
        while (extents := self._alloc.alloc(size)) is None:
            victim = self._victim(key)
            if victim is None:
                return None
            self._demote(victim)
        return extents

    def _insert(self, key: str, src: int, size: int, depth: int, device: int) -> bool:
        extents = self._room_for(key, size)
        if extents is None:
            return False
        self._pool.copy_in(extents, src, size, device)
        self._blocks[key] = LocalBlock(extents, size, depth)
        self._order.add(key, depth)
        if self._used() > self._high:
            while self._used() > self._low:
                victim = self._victim(key)
                if victim is None:
                    break
                self._demote(victim)
        return True

    # -- data -----------------------------------------------------------------------------------
    def _put_batch(
        self, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int], depths: Sequence[int], devs: list[int]
    ) -> list[bool]:
        if self.role == UMBPRole.SharedSSDFollower:
            self._live()
            return [False] * len(keys)  # MORI: a follower never writes; its leader does
        leader = self.role == UMBPRole.SharedSSDLeader
        out: list[bool] = []
        with self._lock:
            self._batch = set()
            try:
                for key, ptr, size, depth, dev in zip(keys, ptrs, sizes, depths, devs, strict=True):
                    self._batch.add(key)
                    if self._holds(key):
                        out.append(True)  # first writer wins
                    else:
                        out.append(self._insert(key, ptr, size, depth, dev))
                        if out[-1] and leader:
                            self._write_through(key)
                    if not out[-1]:
                        self._batch.discard(key)
                # A same-batch block demoted to SSD and dropped there since: its put did not hold.
                return [ok and self._holds(key) for key, ok in zip(keys, out, strict=True)]
            finally:
                self._batch = set()

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
        if self.ssd is None and self.shared is None:
            return False
        host = bytearray(size)  # a file reads into host memory; promotion copies from there too
        addr = ctypes.addressof(ctypes.c_char.from_buffer(host))
        if self.shared is not None:
            depth = self.shared.read_into(key, addr, size)
            if depth is None:
                return False
        else:
            assert self.ssd is not None
            if not self.ssd.read_into(key, addr, size):
                return False
            depth = self.ssd.depth_of(key)
        devmem.copy(ptr, dev, addr, devmem.HOST, size)
        if self._promote:
            self._insert(key, addr, size, depth, devmem.HOST)
        return True

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        """A pure probe: no LRU bump."""
        self._live()
        with self._lock:
            return [k in self._blocks or self._on_ssd(k) for k in keys]

    def _on_ssd(self, key: str) -> bool:
        if self.shared is not None:
            return key in self.shared
        return self.ssd is not None and key in self.ssd

    def keys_by_tier(self) -> dict[str, list[str]]:
        """{"DRAM": [...], "SSD": [...]}: the keys each tier holds, sorted."""
        with self._lock:
            if self.shared is not None:
                ssd = self.shared.keys()
            else:
                ssd = sorted(k for k, _ in self.ssd.entries()) if self.ssd is not None else []
            return {"DRAM": sorted(self._blocks), "SSD": ssd}

    def clear(self) -> bool:
        """Drops every block; a follower drops its own DRAM blocks only (the shared directory is
        its leader's)."""
        self._live()
        with self._lock:
            for key in list(self._blocks):
                block = self._blocks.pop(key)
                self._order.remove(key)
                self._alloc.free(block.pages)
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
