# SPDX-License-Identifier: MIT
"""The SSD tier: committed blocks copied into files under a directory, with its own capacity and
local watermark eviction (MORI's PeerSsdManager; the master never evicts SSD).

One file per block, named by the SHA-256 of its key (keys may be long and hold '/'). A file is
a header (see ``peer.ssd_format``: magic, version, committed flag, key and value lengths, chain
depth, CRC-32 of key and value), the key, then the value; it is written under a temporary name
and renamed into place, so a reader never sees a partial block, and its CRC is checked on every
read. With ``recover`` a (re)started tier re-discovers its committed blocks from the headers,
oldest file first in its LRU order, and discards temporary files and torn or corrupt ones
(a crash between write and rename, or a rename whose data never reached the disk); without it,
it deletes them and starts empty.
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
from mori.umbp.peer import ssd_format
from mori.umbp.peer.lru import EvictionOrder

log = logging.getLogger(__name__)
SUFFIX = ".blk"


@dataclass(frozen=True)
class SsdEntry:
    path: Path
    size: int
    crc: int
    key_crc: int  # CRC-32 of the key alone: the start value for checking the value on a read
    offset: int  # where the value starts in the file


def key_path(directory: Path, key: str) -> Path:
    return directory / (hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest() + SUFFIX)


class SsdTier:
    def __init__(
        self,
        directory: Path,
        capacity: int,
        high_wm: float,
        low_wm: float,
        policy: str = "lru",
        window: int = 16,
        recover: bool = False,
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
        self.capacity = capacity
        self.high_wm, self.low_wm = high_wm, low_wm
        self.recover = recover
        self._lock = threading.Lock()
        self._entries: dict[str, SsdEntry] = {}
        self._order = EvictionOrder(policy, window)
        self._used = 0
        #: Blocks re-discovered from a previous run (0 without ``recover``).
        self.recovered = self._load() if recover else self._wipe()

    # -- start ----------------------------------------------------------------------------------
    def _wipe(self) -> int:
        for stale in [*self.dir.glob(f"*{SUFFIX}"), *self.dir.glob(f"*{SUFFIX}.tmp")]:
            stale.unlink(missing_ok=True)  # a previous run's blocks: not wanted
        return 0

    def _load(self) -> int:
        for torn in self.dir.glob(f"*{SUFFIX}.tmp"):
            log.warning("SSD tier %s: discarding %s, a write a crash interrupted", self.dir, torn.name)
            torn.unlink(missing_ok=True)
        found = []
        for path in self.dir.glob(f"*{SUFFIX}"):
            try:
                rec = ssd_format.read_record(path)
                if key_path(self.dir, rec.key) != path:
                    raise ssd_format.BadRecord(f"holds key {rec.key!r}, whose file name differs")
                found.append((path.stat().st_mtime_ns, path.name, rec))
            except (ssd_format.BadRecord, OSError) as exc:
                log.warning("SSD tier %s: discarding %s: %s", self.dir, path.name, exc)
                path.unlink(missing_ok=True)
        with self._lock:
            for _, _, rec in sorted(found, key=lambda f: (f[0], f[1])):  # oldest first: the LRU end
                self._entries[rec.key] = SsdEntry(rec.path, rec.size, rec.crc, rec.key_crc, rec.offset)
                self._order.add(rec.key, rec.depth)
                self._used += rec.size
            self._evict_until(self.capacity, frozenset())  # the capacity may have shrunk since
            if self._used > self.high_wm * self.capacity:
                self._evict_until(int(self.low_wm * self.capacity), frozenset())
            log.info("SSD tier %s: recovered %d blocks (%d bytes)", self.dir, len(self._entries), self._used)
            return len(self._entries)

    # -- queries --------------------------------------------------------------------------------
    @property
    def used(self) -> int:
        with self._lock:
            return self._used

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def size_of(self, key: str) -> int | None:
        with self._lock:
            entry = self._entries.get(key)
            return None if entry is None else entry.size

    def depth_of(self, key: str) -> int:
        with self._lock:
            return self._order.depth(key)

    def entries(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(k, e.size) for k, e in self._entries.items()]

    # -- writes and reads -----------------------------------------------------------------------
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
        path = key_path(self.dir, key)
        tmp = path.with_name(path.name + ".tmp")
        try:
            rec = ssd_format.write_record(tmp, key, data, depth)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise PeerUnavailableError(f"writing SSD block {key!r} to {tmp} failed: {exc}") from None
        with self._lock:
            evicted = self._evict_until(self.capacity - size, frozenset())
            os.replace(tmp, path)
            self._entries[key] = SsdEntry(path, size, rec.crc, rec.key_crc, rec.offset)
            self._order.add(key, depth)
            self._used += size
            if self._used > self.high_wm * self.capacity:  # MORI's EvictToLowWatermark
                evicted += self._evict_until(int(self.low_wm * self.capacity), frozenset({key}))
        return evicted

    def read_into(self, key: str, ptr: int, size: int) -> bool:
        """Copies the block into host memory [ptr, ptr+size); False if it is not (or no longer)
        here. The lock is held so eviction cannot delete the file mid-read."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False
            if entry.size != size:
                raise InvalidArgumentError(f"size={size} but SSD block {key!r} holds {entry.size} bytes")
            view = memoryview((ctypes.c_char * size).from_address(ptr)).cast("B")
            with open(entry.path, "rb") as f:
                f.seek(entry.offset)
                got = f.readinto(view)
            if got != size or zlib.crc32(view, entry.key_crc) != entry.crc:
                raise PeerUnavailableError(f"SSD block {key!r} in {entry.path} is corrupt (read {got} of {size} bytes)")
            self._order.touch(key)
            return True

    # -- eviction -------------------------------------------------------------------------------
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

    def clear(self) -> list[tuple[str, int]]:
        """Drops every block and its file."""
        with self._lock:
            return [(k, self._drop(k)) for k in list(self._entries)]

    def close(self) -> None:
        """Keeps the files for the next run when ``recover`` is on; deletes them otherwise."""
        if not self.recover:
            self.clear()
