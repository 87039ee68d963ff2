# SPDX-License-Identifier: MIT
"""UMBPHostMemAllocator maps real memory: bytes written through the pointer read back, a memfd
backing is the same memory through its fd, hugetlb requests the kernel cannot serve demote to
normal pages, NUMA binding and prefaulting show in the kernel's own /proc/self/numa_maps, and
free is idempotent. The DRAM tiers take their memory from it (``dram.use_hugepages`` etc.)."""

from __future__ import annotations

import ctypes
import mmap
import os
import re
from pathlib import Path

import numpy as np
import pytest

from mori.umbp import (
    InvalidArgumentError,
    UMBPClient,
    UMBPConfig,
    UMBPDramConfig,
    UMBPHostBufferBacking,
    UMBPHostBufferHandle,
    UMBPHostMemAllocator,
)
from mori.umbp.peer.pools import HostMemory, HostPagePool

B = UMBPHostBufferBacking


def numa_map_line(address: int) -> str | None:
    """The kernel's /proc/self/numa_maps line of the mapping starting at ``address``."""
    path = Path("/proc/self/numa_maps")
    if not path.exists():
        return None
    prefix = f"{address:x} "
    return next((line for line in path.read_text().splitlines() if line.startswith(prefix)), None)


def resident_pages(address: int, length: int) -> int:
    """Pages of [address, address+length) in memory now, as the kernel's mincore(2) reports."""
    libc = ctypes.CDLL(None, use_errno=True)
    pages = -(-length // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * pages)()
    assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(length), vec) == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec)


def hugetlb_free_pages() -> int:
    match = re.search(r"^HugePages_Free:\s+(\d+)", Path("/proc/meminfo").read_text(), re.MULTILINE)
    return int(match.group(1)) if match else 0


@pytest.mark.parametrize("backing", list(B))
def test_write_read_through_the_pointer_and_free_twice(backing):
    alloc = UMBPHostMemAllocator()
    size = 3 * mmap.PAGESIZE + 17
    handle = alloc.alloc(size, backing)
    assert handle and handle.requested_size == size
    assert handle.mapped_size >= size and handle.mapped_size % handle.actual_alignment == 0
    if handle.actual_backing in (B.Anonymous, B.AnonymousShm):
        assert handle.actual_alignment == mmap.PAGESIZE
    pattern = np.random.default_rng(7).integers(0, 256, size, dtype=np.uint8)
    ctypes.memmove(handle.ptr, pattern.ctypes.data, size)
    assert ctypes.string_at(handle.ptr, size) == pattern.tobytes()
    alloc.free(handle)
    assert not handle and handle.ptr == 0 and handle.mapped_size == 0
    alloc.free(handle)  # idempotent
    alloc.free(UMBPHostBufferHandle())  # an empty handle, as MORI's default-constructed one


def test_shm_backing_is_one_memory_through_its_fd():
    alloc = UMBPHostMemAllocator()
    handle = alloc.alloc(2 * mmap.PAGESIZE, B.AnonymousShm)
    try:
        assert handle.actual_backing == B.AnonymousShm and handle.fd >= 0
        with mmap.mmap(handle.fd, handle.mapped_size) as other:  # a second mapping, as a peer process would
            other[100:105] = b"hello"
            assert ctypes.string_at(handle.ptr + 100, 5) == b"hello"
            ctypes.memmove(handle.ptr + 200, b"world", 5)
            assert other[200:205] == b"world"
    finally:
        fd = handle.fd
        alloc.free(handle)
    with pytest.raises(OSError):
        os.fstat(fd)  # free closed the memfd


@pytest.mark.parametrize("backing", [B.AnonymousHugetlb, B.AnonymousShmHugetlb])
def test_hugetlb_of_a_size_the_kernel_lacks_demotes_to_normal_pages(backing):
    # 64 KiB is a power of two but no hugetlb size on any Linux the suite runs on: mmap says EINVAL.
    alloc = UMBPHostMemAllocator()
    handle = alloc.alloc(1 << 20, backing, hugepage_size=64 << 10)
    demoted = B.Anonymous if backing == B.AnonymousHugetlb else B.AnonymousShm
    assert (handle.actual_backing, handle.actual_alignment) == (demoted, mmap.PAGESIZE)
    ctypes.memset(handle.ptr, 0x5A, 1 << 20)
    assert ctypes.string_at(handle.ptr + (1 << 20) - 1, 1) == b"\x5a"
    alloc.free(handle)


def test_hugetlb_uses_huge_pages_when_reserved_else_demotes():
    alloc = UMBPHostMemAllocator()
    handle = alloc.alloc(2 << 20, B.AnonymousHugetlb)
    try:
        if hugetlb_free_pages() == 0 and handle.actual_backing == B.Anonymous:
            assert handle.actual_alignment == mmap.PAGESIZE  # none reserved here: demoted
        else:
            assert (handle.actual_backing, handle.actual_alignment, handle.mapped_size) == (
                B.AnonymousHugetlb,
                2 << 20,
                2 << 20,
            )
        ctypes.memset(handle.ptr, 1, 2 << 20)
    finally:
        alloc.free(handle)


def test_prefault_populates_and_numa_binding_shows_in_numa_maps():
    alloc = UMBPHostMemAllocator()
    pages = 64
    size = pages * mmap.PAGESIZE
    eager = alloc.alloc(size, prefault=True)
    lazy = alloc.alloc(size, prefault=False)
    bound = alloc.alloc(size, numa_node=0, prefault=True)
    try:
        assert resident_pages(eager.ptr, size) == pages
        assert resident_pages(lazy.ptr, size) == 0
        ctypes.memset(lazy.ptr, 1, mmap.PAGESIZE)
        assert resident_pages(lazy.ptr, size) == 1
        assert resident_pages(bound.ptr, size) == pages
        line = numa_map_line(bound.ptr)  # its own policy keeps the kernel from merging it with a neighbour
        if line is None:
            pytest.skip("no /proc/self/numa_maps on this kernel")
        assert " bind:0 " in line and f" anon={pages} " in line, line
    finally:
        for handle in (eager, lazy, bound):
            alloc.free(handle)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"size": 0}, r"size=0 must be a positive int"),
        ({"size": -5}, r"size=-5 must be a positive int"),
        ({"size": 4096, "backing": 9}, r"backing=9 is not a UMBPHostBufferBacking"),
        ({"size": 4096, "hugepage_size": 3000}, r"hugepage_size=3000 must be a power of two >= the page size"),
        ({"size": 4096, "numa_node": -2}, r"numa_node=-2 must be -1 \(no binding\) or a node number >= 0"),
        ({"size": 4096, "numa_node": 4095}, r"numa_node=4095 is not a NUMA node of this machine \(nodes: \["),
    ],
)
def test_bad_arguments_raise_typed_errors(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match) as err:
        UMBPHostMemAllocator().alloc(**kwargs)
    assert isinstance(err.value, RuntimeError)  # MORI raises RuntimeError


def test_dram_tiers_take_their_memory_from_the_allocator(tmp_path):
    pool = HostPagePool(None, 64 * mmap.PAGESIZE, mmap.PAGESIZE, HostMemory(False, 2 << 20, 0, True))
    line = numa_map_line(pool.base)
    if line is not None:
        assert " bind:0 " in line and " anon=64 " in line, line
    config = UMBPConfig(UMBPDramConfig(8 << 20, 2 << 20, use_hugepages=True, hugepage_size=64 << 10, numa_node=0))
    with UMBPClient(config) as client:
        mapping = client._pool.mapping
        # dram.use_hugepages asked for hugetlb; 64 KiB pages do not exist, so normal pages, as MORI.
        assert (mapping.actual_backing, mapping.requested_size) == (B.Anonymous, 8 << 20)
        line = numa_map_line(mapping.ptr)
        if line is not None:
            assert " bind:0 " in line, line
        data = np.arange(5000, dtype=np.uint8)
        assert client.put_from_ptr("k", data.ctypes.data, data.nbytes)
        out = np.zeros_like(data)
        assert client.get_into_ptr("k", out.ctypes.data, out.nbytes) and np.array_equal(out, data)


def test_dram_memory_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("UMBP_DRAM_USE_HUGEPAGES", "1")
    monkeypatch.setenv("UMBP_DRAM_HUGEPAGE_SIZE", "1G")
    monkeypatch.setenv("UMBP_DRAM_NUMA_NODE", "0")
    monkeypatch.setenv("UMBP_DRAM_PREFAULT", "0")
    dram = UMBPConfig.from_environment(distributed=False).dram
    assert (dram.use_hugepages, dram.hugepage_size, dram.numa_node, dram.prefault) == (True, 1 << 30, 0, False)


def test_a_distributed_nodes_dram_pages_come_from_the_allocator():
    from conftest import master_config

    from mori.umbp import MasterServer, UMBPDistributedConfig, UMBPMasterClientConfig, UMBPTierType

    with MasterServer(master_config()) as master:
        mc = UMBPMasterClientConfig(master.address, "numa-node", "127.0.0.1")
        dram = UMBPDramConfig(16 << 16, 1 << 16, numa_node=0, use_hugepages=True, hugepage_size=64 << 10)
        with UMBPClient(UMBPConfig(dram, UMBPDistributedConfig(mc, staging_buffer_size=1 << 20))) as node:
            pool = node.store.pools[int(UMBPTierType.DRAM)]
            assert (pool.mapping.requested_size, pool.mapping.actual_backing) == (16 << 16, B.Anonymous)
            assert pool.base == pool.mapping.ptr and pool.desc is not None  # registered with mori-io
            line = numa_map_line(pool.base)
            if line is not None:
                assert " bind:0 " in line, line
