# SPDX-License-Identifier: MIT
"""The peer's SSD tier: committed blocks copied into files under a directory, with its own
capacity and local watermark eviction (MORI's PeerSsdManager; the master never evicts SSD).

One file per block, named by the SHA-256 of its key (keys may be long and hold '/'). A file is
written under a temporary name and renamed into place, so a reader never sees a partial block;
its CRC-32 is kept in memory and checked on every read. The index lives in memory only: a
restarted peer starts with an empty tier and removes the files of its previous run.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

from mori.umbp.errors import ConfigError, InvalidArgumentError, PeerUnavailableError, TierCapacityError
from mori.umbp.peer.lru import EvictionOrder

log = logging.getLogger(__name__)
SUFFIX = ".blk"


@dataclass(frozen=True)
class SsdEntry:
    path: Path
    size: int
    crc: int


class SsdTier:
    def __init__(
        self, directory: Path, capacity: int, high_wm: float, low_wm: float, policy: str = "lru", window: int = 16
    ) -> None:
        if capacity <= 0:
            raise ConfigError(f"ssd.capacity_bytes={capacity} must be positive when the SSD tier is enabled")
        if not 0 < low_wm < high_wm <= 1:
            raise ConfigError(f"ssd watermarks low={low_wm}, high={high_wm} must satisfy 0 < low < high <= 1")
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"ssd.storage_dir={str(directory)!r} cannot be created: {exc}") from None
        for stale in [*self.dir.glob(f"*{SUFFIX}"), *self.dir.glob(f"*{SUFFIX}.tmp")]:
            stale.unlink(missing_ok=True)  # a previous run's blocks: their index died with it
        self.capacity = capacity
        self.high_wm, self.low_wm = high_wm, low_wm
        self._lock = threading.Lock()
        self._entries: dict[str, SsdEntry] = {}
        self._order = EvictionOrder(policy, window)
        self._used = 0

    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def _path(self, key: str) -> Path:
        return self.dir / (hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest() + SUFFIX)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def size_of(self, key: str) -> int | None:
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.size

    def entries(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(k, e.size) for k, e in self._entries.items()]

    def put(self, key: str, data: bytes | bytearray, depth: int = -1) -> list[tuple[str, int]]:
        """Stores ``data`` under ``key``; returns the (key, size) of the blocks evicted for it.

        Raises TierCapacityError when the block could never fit. The file is written before the
        lock is taken, so slow I/O never blocks readers of other blocks.
        """
        size = len(data)
        if size > self.capacity:
            raise TierCapacityError(
                f"block {key!r} of size={size} exceeds the SSD tier's capacity_bytes={self.capacity}"
            )
        if key in self:
            with self._lock:
                self._order.touch(key)
            return []
        path = self._path(key)
        tmp = path.with_name(path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise PeerUnavailableError(f"writing SSD block {key!r} to {tmp} failed: {exc}") from None
        with self._lock:
            evicted = self._evict_until(self.capacity - size, frozenset())
            os.replace(tmp, path)
            self._entries[key] = SsdEntry(path, size, zlib.crc32(data))
            self._order.add(key, depth)
            self._used += size
            if self._used > self.high_wm * self.capacity:  # MORI's EvictToLowWatermark
                evicted += self._evict_until(int(self.low_wm * self.capacity), frozenset({key}))
        return evicted

    def read_into(self, key: str, ptr: int, size: int) -> bool:
        """Copies the block into [ptr, ptr+size); False if it is not (or no longer) here. The
        lock is held so eviction cannot delete the file mid-read."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False
            if entry.size != size:
                raise InvalidArgumentError(f"size={size} but SSD block {key!r} holds {entry.size} bytes")
            view = (ctypes.c_char * size).from_address(ptr)
            with open(entry.path, "rb") as f:
                got = f.readinto(memoryview(view).cast("B"))
            if got != size or zlib.crc32(memoryview(view).cast("B")) != entry.crc:
                raise PeerUnavailableError(f"SSD block {key!r} in {entry.path} is corrupt (read {got} of {size} bytes)")
            self._order.touch(key)
            return True

    def evict(self, keys: list[str]) -> list[tuple[str, int]]:
        with self._lock:
            return [(k, self._drop(k)) for k in keys if k in self._entries]

    def _evict_until(self, target_used: int, skip: frozenset[str]) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        while self._used > target_used:
            victim = self._order.victim(skip)
            if victim is None:
                break
            out.append((victim, self._drop(victim)))
        if out:
            log.info("SSD tier %s: evicted %d blocks (%d bytes used)", self.dir, len(out), self._used)
        return out

    def _drop(self, key: str) -> int:
        entry = self._entries.pop(key)
        self._order.remove(key)
        self._used -= entry.size
        entry.path.unlink(missing_ok=True)
        return entry.size

    def close(self) -> None:
        with self._lock:
            for key in list(self._entries):
                self._drop(key)
