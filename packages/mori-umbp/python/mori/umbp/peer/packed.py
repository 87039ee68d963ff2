# SPDX-License-Identifier: MIT
"""Sub-page allocation for the local mode's DRAM tier: blocks packed within pages.

A block of ``size`` bytes takes ``size // page_size`` wholly free pages plus one extent of the
remainder (rounded up to ``ALIGN``) found first-fit inside a page that is already partly used, or
else in a free page. So a tier of ``capacity`` bytes holds ``capacity // round_up(size, ALIGN)``
small blocks (whole pages per block held 4 KiB blocks at 1/512 of that with 2 MiB pages), and a
freed extent merges with its free neighbours, so a page whose blocks are all gone is whole again.
An allocation is a list of (offset in the buffer, length) extents, never partly taken.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any

from mori.umbp.peer.allocator import PagedAllocator
from mori.umbp.peer.pools import HostMemory, HostPagePool, Placement

#: Extent alignment: a cache line, so packed blocks never share one.
ALIGN = 64

Extent = tuple[int, int]  # (offset in the buffer, length)


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


class PackedAllocator(PagedAllocator):
    """First-fit extents inside fixed-size pages; thread-safe."""

    def __init__(self, capacity: int, page_size: int) -> None:
        if page_size % ALIGN:
            raise ValueError(f"page_size={page_size} must be a multiple of {ALIGN}")
        super().__init__(capacity, page_size)
        # Per page: sorted free (start, length) runs in page-local offsets.
        self._free: list[list[Extent]] = [[(0, page_size)] for _ in range(self.num_pages)]
        self._whole: list[int] = list(range(self.num_pages))  # wholly free pages, sorted
        self._partial: set[int] = set()  # pages with some free and some used bytes
        self._available = self.num_pages * page_size

    def _free_bytes(self) -> int:
        return self._available

    def footprint(self, size: int) -> int:
        """Bytes a block of ``size`` takes."""
        full, rem = divmod(size, self.page_size)
        return full * self.page_size + _round_up(rem, ALIGN)

    def alloc(self, size: int) -> list[Extent] | None:
        """Extents for ``size`` bytes, or None when they cannot be found (nothing is taken then)."""
        full, rem = divmod(size, self.page_size)
        need = _round_up(rem, ALIGN)
        with self._lock:
            if full > len(self._whole):
                return None
            host = self._fit(need, full) if need else None
            if need and host is None:
                return None
            pages = self._whole[:full]
            del self._whole[:full]
            extents = [(p * self.page_size, self.page_size) for p in pages]
            for p in pages:
                self._free[p] = []
            if host is not None:
                extents.append(self._take(host, need))
            self._available -= full * self.page_size + need
            return extents

    def _fit(self, need: int, full: int) -> int | None:
        """The page whose free run takes ``need`` bytes: a partly used page first (first fit, by
        index), else the first wholly free page after the ``full`` ones the block takes whole."""
        for page in sorted(self._partial):
            if any(length >= need for _, length in self._free[page]):
                return page
        return self._whole[full] if len(self._whole) > full else None

    def _take(self, page: int, need: int) -> Extent:
        runs = self._free[page]
        if page in self._whole:
            self._whole.remove(page)
        i = next(i for i, (_, length) in enumerate(runs) if length >= need)
        start, length = runs[i]
        if length == need:
            del runs[i]
        else:
            runs[i] = (start + need, length - need)
        self._sort_out(page)
        return page * self.page_size + start, need

    def _sort_out(self, page: int) -> None:
        runs = self._free[page]
        if runs == [(0, self.page_size)]:
            self._partial.discard(page)
            if page not in self._whole:
                bisect.insort(self._whole, page)
        elif runs:
            self._partial.add(page)
        else:
            self._partial.discard(page)

    def free(self, extents: list[Extent]) -> None:
        with self._lock:
            for offset, length in extents:
                page, start = divmod(offset, self.page_size)
                runs = self._free[page]
                i = bisect.bisect(runs, (start, length))
                runs.insert(i, (start, length))
                # Merge with the neighbours so a page empties back into one run.
                if i + 1 < len(runs) and runs[i][0] + runs[i][1] == runs[i + 1][0]:
                    runs[i] = (runs[i][0], runs[i][1] + runs[i + 1][1])
                    del runs[i + 1]
                if i > 0 and runs[i - 1][0] + runs[i - 1][1] == runs[i][0]:
                    runs[i - 1] = (runs[i - 1][0], runs[i - 1][1] + runs[i][1])
                    del runs[i]
                self._available += length
                self._sort_out(page)


class PackedHostPool(HostPagePool):
    """A host-memory tier whose blocks are PackedAllocator extents instead of whole pages (never
    registered with mori-io: the local mode moves no bytes to peers)."""

    def __init__(self, capacity: int, page_size: int, memory: HostMemory | None = None) -> None:
        super().__init__(None, capacity, page_size, memory)
        self.alloc: Any = PackedAllocator(capacity, page_size)

    def _segments(self, pages: Placement, size: int) -> Iterator[tuple[int, int, int]]:
        done = 0
        for offset, length in pages:
            n = min(length, size - done)
            yield offset, done, n
            done += n
