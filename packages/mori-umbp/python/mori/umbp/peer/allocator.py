# SPDX-License-Identifier: MIT
"""Fixed-size page allocator over one registered buffer (MORI's PeerDramAllocator).

A block takes whole pages, not necessarily contiguous: a put scatters into them with one batched
mori-io write, so fragmentation never makes a block unplaceable while enough pages are free.
"""

from __future__ import annotations

import threading


class PageAllocator:
    def __init__(self, capacity: int, page_size: int) -> None:
        self.page_size = page_size
        self.num_pages = capacity // page_size if page_size else 0
        self._free = list(range(self.num_pages - 1, -1, -1))  # pop() hands out low pages first
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.num_pages * self.page_size

    @property
    def available(self) -> int:
        with self._lock:
            return len(self._free) * self.page_size

    def pages_for(self, size: int) -> int:
        return -(-size // self.page_size)

    def alloc(self, size: int) -> list[int] | None:
        """Pages for ``size`` bytes, or None when too few are free (nothing is taken then)."""
        n = self.pages_for(size)
        with self._lock:
            if n > len(self._free):
                return None
            return [self._free.pop() for _ in range(n)]

    def free(self, pages: list[int]) -> None:
        with self._lock:
            self._free.extend(pages)
