# SPDX-License-Identifier: MIT
"""Fixed-size page allocator over one registered buffer (MORI's PeerDramAllocator).

A block takes whole pages, not necessarily contiguous: a put scatters into them with one batched
mori-io write, so fragmentation never makes a block unplaceable while enough pages are free.
"""

from __future__ import annotations

import threading


class PagedAllocator:
    """What every allocator over ``capacity // page_size`` pages of ``page_size`` bytes has: its
    capacity, and its free bytes read under the lock that its allocations and frees take."""

    def __init__(self, capacity: int, page_size: int) -> None:
        self.page_size = page_size
        self.num_pages = capacity // page_size if page_size else 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.num_pages * self.page_size

    @property
    def available(self) -> int:
        with self._lock:
            return self._free_bytes()

    def _free_bytes(self) -> int:
        raise NotImplementedError


class PageAllocator(PagedAllocator):
    def __init__(self, capacity: int, page_size: int) -> None:
        super().__init__(capacity, page_size)
        self._free = list(range(self.num_pages - 1, -1, -1))  # pop() hands out low pages first

    def _free_bytes(self) -> int:
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
