# SPDX-License-Identifier: MIT
"""A tier's pages: one buffer registered with mori-io and cut into fixed-size pages.

DRAM is host memory mapped by UMBPHostMemAllocator (seen through numpy); HBM is one CUDA tensor
on the configured device (torch is imported only for it). Remote peers reach either with mori-io
(the TCP backend stages GPU memory through pinned host buffers; the P2P backend copies GPU to GPU
on one host). The owner's own copies (a put or get that targets itself, demotion, spills) run
here: ``ctypes.memmove`` when both sides are host memory, torch copies when either is on a GPU.
"""

from __future__ import annotations

import ctypes
import logging
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.io import IOEngine, MemoryDesc, MemoryLocationType, UnsupportedError
from mori.umbp import devmem
from mori.umbp.client.config import UMBPDramConfig
from mori.umbp.errors import ConfigError, InvalidArgumentError, TierUnavailableError
from mori.umbp.hostmem import UMBPHostBufferBacking, UMBPHostBufferHandle, UMBPHostMemAllocator
from mori.umbp.peer.allocator import PageAllocator
from mori.umbp.types import UMBPTierType

log = logging.getLogger(__name__)

#: Where a block lies in a pool: its page numbers, or (offset, length) extents in a packed pool.
Placement = Sequence[Any]

#: PageRef.buffer_index of each registered buffer a peer hands out (1 is the SSD staging buffer).
DRAM_BUFFER, STAGING_BUFFER, HBM_BUFFER = 0, 1, 2


class PagePool:
    """Pages of one tier. Subclasses own the memory at ``base`` (on ``device``)."""

    tier: int
    buffer_index: int
    device: int = devmem.HOST
    base: int = 0

    def __init__(self, capacity: int, page_size: int) -> None:
        self.alloc = PageAllocator(capacity, page_size)
        self.page_size = page_size
        self.desc: MemoryDesc | None = None

    @property
    def capacity(self) -> int:
        return self.alloc.capacity

    def _segments(self, pages: Placement, size: int) -> Iterator[tuple[int, int, int]]:
        """(offset in the buffer, offset in the block, bytes) per page of a ``size``-byte block."""
        ps = self.page_size
        for i, page in enumerate(pages):
            yield page * ps, i * ps, min(ps, size - i * ps)

    def _tensor(self, torch: Any) -> Any:
        raise NotImplementedError

    def _copy(self, into_pool: bool, pages: Placement, ptr: int, size: int, device: int) -> None:
        if self.device == devmem.HOST and device == devmem.HOST:
            for off, boff, n in self._segments(pages, size):
                dst, src = (self.base + off, ptr + boff) if into_pool else (ptr + boff, self.base + off)
                ctypes.memmove(dst, src, n)
            return
        torch = devmem.require_cuda("device", max(device, self.device), max(device, self.device))
        pool, other = self._tensor(torch), devmem.view(torch, ptr, size, device)
        for off, boff, n in self._segments(pages, size):
            if into_pool:
                pool[off : off + n].copy_(other[boff : boff + n])
            else:
                other[boff : boff + n].copy_(pool[off : off + n])
        # Remote readers reach these pages through mori-io's own streams: the bytes must have
        # landed before a commit (or a caller) can see them.
        for dev in {device, self.device} - {devmem.HOST}:
            torch.cuda.synchronize(dev)

    def copy_in(self, pages: Placement, src: int, size: int, src_device: int = devmem.HOST) -> None:
        self._copy(True, pages, src, size, src_device)

    def copy_out(self, pages: Placement, dst: int, size: int, dst_device: int = devmem.HOST) -> None:
        self._copy(False, pages, dst, size, dst_device)

    def close(self, engine: IOEngine | None) -> None:
        if self.desc is not None and engine is not None:
            engine.deregister_memory(self.desc)
        self.desc = None


@dataclass(frozen=True)
class HostMemory:
    """How a DRAM tier's buffer is mapped (MORI's DramOwnershipConfig): hugetlb pages of
    ``hugepage_size`` or normal ones, bound to ``numa_node`` (-1: unbound), prefaulted or not."""

    use_hugepages: bool = False
    hugepage_size: int = 2 << 20
    numa_node: int = -1
    prefault: bool = True


def host_memory(dram: UMBPDramConfig) -> HostMemory:
    return HostMemory(dram.use_hugepages, dram.hugepage_size, dram.numa_node, dram.prefault)


def map_host_buffer(size: int, memory: HostMemory) -> UMBPHostBufferHandle:
    """``size`` bytes (zero-filled) from UMBPHostMemAllocator as ``memory`` says; ConfigError names
    the dram.* field that is out of range."""
    backing = UMBPHostBufferBacking.AnonymousHugetlb if memory.use_hugepages else UMBPHostBufferBacking.Anonymous
    try:
        return _HOST_ALLOCATOR.alloc(size, backing, memory.hugepage_size, memory.numa_node, memory.prefault)
    except InvalidArgumentError as exc:
        raise ConfigError(f"dram.{exc}") from None


_HOST_ALLOCATOR = UMBPHostMemAllocator()


class HostPagePool(PagePool):
    """The DRAM tier (MORI's PeerDramAllocator): memory from UMBPHostMemAllocator (hugetlb and
    NUMA binding as ``memory`` says), registered when ``engine`` is given; unmapped when the pool
    is garbage-collected."""

    tier = int(UMBPTierType.DRAM)
    buffer_index = DRAM_BUFFER

    def __init__(
        self, engine: IOEngine | None, capacity: int, page_size: int, memory: HostMemory | None = None
    ) -> None:
        super().__init__(capacity, page_size)
        self.mapping = map_host_buffer(max(self.capacity, 1), memory or HostMemory())
        weakref.finalize(self, _HOST_ALLOCATOR.free, self.mapping)
        self.base = self.mapping.ptr
        self.buffer = np.ctypeslib.as_array((ctypes.c_uint8 * max(self.capacity, 1)).from_address(self.base))
        if engine is not None and self.capacity:
            self.desc = engine.register_memory(self.base, self.capacity, -1, MemoryLocationType.CPU)

    def _tensor(self, torch: Any) -> Any:
        return torch.from_numpy(self.buffer)


class DevicePagePool(PagePool):
    """The HBM tier: one CUDA tensor of ``capacity`` bytes on ``device_id``, registered with mori-io
    (which exports it by CUDA IPC handle for P2P peers)."""

    tier = int(UMBPTierType.HBM)
    buffer_index = HBM_BUFFER

    def __init__(self, engine: IOEngine, capacity: int, page_size: int, device_id: int) -> None:
        if page_size < 4096 or capacity < page_size:
            raise ConfigError(
                f"hbm.capacity_bytes={capacity} must hold at least one page of hbm.page_size={page_size} (>= 4096)"
            )
        torch = devmem.require_cuda("hbm.capacity_bytes", capacity, device_id)
        super().__init__(capacity, page_size)
        self.device = device_id
        self.tensor = torch.zeros(self.capacity, dtype=torch.uint8, device=f"cuda:{device_id}")
        torch.cuda.synchronize(device_id)
        self.base = int(self.tensor.data_ptr())
        try:
            self.desc = engine.register_memory(self.base, self.capacity, device_id, MemoryLocationType.GPU)
        except UnsupportedError as exc:
            raise TierUnavailableError(f"hbm.capacity_bytes={capacity}: mori-io cannot register it: {exc}") from None
        log.info("HBM tier: %d pages of %d bytes on cuda:%d", self.alloc.num_pages, page_size, device_id)

    def _tensor(self, torch: Any) -> Any:
        return self.tensor
