# SPDX-License-Identifier: MIT
"""Page-aligned anonymous buffers with a stable address (no numpy needed)."""

from __future__ import annotations

import ctypes
import mmap


class Buffer:
    """``size`` bytes of anonymous memory; ``address`` stays valid while the object lives."""

    def __init__(self, size: int, fill: int | None = None) -> None:
        self.size = max(size, 1)
        self.map = mmap.mmap(-1, self.size)
        self.view = memoryview(self.map)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        if fill is not None:
            self.map.write(bytes([fill]) * self.size)  # also faults every page in before timing
            self.map.seek(0)
        else:
            self.touch()

    def touch(self) -> None:
        for offset in range(0, self.size, mmap.PAGESIZE):
            self.view[offset] = 0
