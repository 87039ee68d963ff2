# SPDX-License-Identifier: MIT
"""Staging slots for SSD reads by remote peers (MORI's PrepareSsdRead staging buffer).

mori-io moves bytes between registered memory, and a file is not registered memory, so a remote
reader of an SSD block reads it from a slot of this host buffer, registered with mori-io once.
The buffer is cut into equal slots (MORI: 256 MiB in 16 slots); the owner copies the file into
a free slot under a lease, and the reader releases the lease when its transfer is done. A lease
whose reader died expires after UMBP_SSD_READ_LEASE_MS, so a slot is never lost.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from mori.io import IOEngine, MemoryDesc, MemoryLocationType
from mori.umbp.errors import ConfigError


class SsdStaging:
    def __init__(self, engine: IOEngine, size: int, slots: int, lease_s: float) -> None:
        if slots < 1 or size < slots:
            raise ConfigError(f"ssd staging size={size} and slots={slots} must give at least one byte per slot")
        self.slot_size = size // slots
        self.lease_s = lease_s
        self.buffer = np.zeros(self.slot_size * slots, dtype=np.uint8)
        self.desc: MemoryDesc | None = engine.register_memory(
            self.buffer.ctypes.data, self.buffer.nbytes, -1, MemoryLocationType.CPU
        )
        self._lock = threading.Lock()
        self._free = list(range(slots - 1, -1, -1))
        self._leases: dict[int, tuple[int, float]] = {}  # lease id -> (slot, deadline)
        self._ids = itertools.count(1)

    def acquire(self) -> tuple[int, int] | None:
        """(lease id, slot) of a free slot, or None when every slot is leased."""
        now = time.monotonic()
        with self._lock:
            for lease_id in [i for i, (_, deadline) in self._leases.items() if deadline <= now]:
                self._free.append(self._leases.pop(lease_id)[0])  # the reader died or forgot
            if not self._free:
                return None
            slot = self._free.pop()
            lease_id = next(self._ids)
            self._leases[lease_id] = (slot, now + self.lease_s)
            return lease_id, slot

    def release(self, lease_id: int) -> bool:
        with self._lock:
            held = self._leases.pop(lease_id, None)
            if held is not None:
                self._free.append(held[0])
            return held is not None

    def address(self, slot: int) -> int:
        return int(self.buffer.ctypes.data) + slot * self.slot_size

    def leased(self) -> int:
        with self._lock:
            return len(self._leases)

    def close(self, engine: IOEngine) -> None:
        if self.desc is not None:
            engine.deregister_memory(self.desc)
            self.desc = None
