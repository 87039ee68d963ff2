# SPDX-License-Identifier: MIT
"""MORI's host-memory allocator: ``UMBPHostMemAllocator``, ``UMBPHostBufferHandle``, ``UMBPHostBufferBacking``.

``alloc`` maps real memory with libc's ``mmap`` (private anonymous, or ``memfd_create`` + shared
mapping for the ``AnonymousShm*`` backings, whose fd another process may map), optionally on
hugetlb pages, binds it to a NUMA node with the ``mbind`` system call and prefaults it. As in MORI,
a hugetlb request that the kernel cannot satisfy (no pages reserved, an unsupported size) demotes
to normal pages: the handle's ``actual_backing`` and ``actual_alignment`` say what was mapped. A
failing ``mbind`` (no NUMA support, a node without memory) is logged once and the memory stays
unbound, as MORI does without its strict mode. ``free`` is idempotent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import logging
import mmap
import os
import platform
import threading
from pathlib import Path

from mori.umbp.errors import InvalidArgumentError

log = logging.getLogger(__name__)

_PROT_RW = mmap.PROT_READ | mmap.PROT_WRITE
_MAP_SHARED, _MAP_PRIVATE, _MAP_ANONYMOUS = 0x01, 0x02, 0x20
_MAP_HUGETLB, _MAP_HUGE_SHIFT = 0x40000, 26
_MFD_CLOEXEC, _MFD_HUGETLB = 0x1, 0x4
_MADV_POPULATE_WRITE = 23
_MPOL_BIND = 2
_MAP_FAILED = ctypes.c_void_p(-1).value
#: ``mbind``'s system call number per machine (glibc exports no wrapper; libnuma may be absent).
_SYS_MBIND = {"x86_64": 237, "aarch64": 235, "ppc64le": 259}

DEFAULT_HUGEPAGE_SIZE = 2 << 20


class UMBPHostBufferBacking(enum.IntEnum):
    """MORI's ``HostBufferBacking``: private anonymous memory, or a memfd (shareable), each
    optionally on hugetlb pages."""

    Anonymous = 0
    AnonymousHugetlb = 1
    AnonymousShm = 2
    AnonymousShmHugetlb = 3


_HUGETLB = {UMBPHostBufferBacking.AnonymousHugetlb, UMBPHostBufferBacking.AnonymousShmHugetlb}
_SHM = {UMBPHostBufferBacking.AnonymousShm, UMBPHostBufferBacking.AnonymousShmHugetlb}
_DEMOTED = {
    UMBPHostBufferBacking.AnonymousHugetlb: UMBPHostBufferBacking.Anonymous,
    UMBPHostBufferBacking.AnonymousShmHugetlb: UMBPHostBufferBacking.AnonymousShm,
}


class UMBPHostBufferHandle:
    """One mapping: ``ptr`` (an int address), ``requested_size``, ``mapped_size`` (rounded up to
    ``actual_alignment``, the page size used), ``actual_backing``; ``fd`` is the memfd of a shm
    backing (-1 otherwise). False once freed (or when default-constructed, as in MORI)."""

    __slots__ = ("_actual_alignment", "_actual_backing", "_fd", "_mapped_size", "_ptr", "_requested_size")

    def __init__(self) -> None:
        self._ptr = 0
        self._requested_size = 0
        self._mapped_size = 0
        self._actual_backing = UMBPHostBufferBacking.Anonymous
        self._actual_alignment = 0
        self._fd = -1

    ptr = property(lambda self: self._ptr)
    requested_size = property(lambda self: self._requested_size)
    mapped_size = property(lambda self: self._mapped_size)
    actual_backing = property(lambda self: self._actual_backing)
    actual_alignment = property(lambda self: self._actual_alignment)
    fd = property(lambda self: self._fd)

    def __bool__(self) -> bool:
        return self._ptr != 0

    def __repr__(self) -> str:
        return (
            f"<UMBPHostBufferHandle ptr={self._ptr:#x} requested_size={self._requested_size} "
            f"mapped_size={self._mapped_size}>"
        )


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.syscall.restype = ctypes.c_long
    return libc


_LIBC = _libc()
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(topic: str, message: str, *args: object) -> None:
    with _warned_lock:
        if topic in _warned:
            return
        _warned.add(topic)
    log.warning(message, *args)


def _round_up(size: int, align: int) -> int:
    return -(-size // align) * align


def _numa_nodes() -> list[int] | None:
    """The NUMA nodes this machine has, or None when sysfs does not say."""
    root = Path("/sys/devices/system/node")
    if not root.is_dir():
        return None
    return sorted(int(p.name[4:]) for p in root.glob("node[0-9]*"))


class UMBPHostMemAllocator:
    """MORI's ``HostMemAllocator``: ``alloc`` and ``free`` (idempotent)."""

    def alloc(
        self,
        size: int,
        backing: UMBPHostBufferBacking = UMBPHostBufferBacking.Anonymous,
        hugepage_size: int = DEFAULT_HUGEPAGE_SIZE,
        numa_node: int = -1,
        prefault: bool = True,
    ) -> UMBPHostBufferHandle:
        """Maps at least ``size`` bytes, zero-filled; raises InvalidArgumentError on bad arguments
        and OSError (naming the size) when the kernel refuses even normal pages."""
        backing = self._check(size, backing, hugepage_size, numa_node)
        handle = UMBPHostBufferHandle()
        handle._requested_size = size
        if backing in _HUGETLB:
            if self._map(handle, size, backing, hugepage_size) and self._prefault(handle, prefault, numa_node):
                return handle
            why = f"no free {hugepage_size}-byte hugetlb pages for {size} bytes (HugePages_Free in /proc/meminfo)"
            _warn_once(f"hugetlb-{hugepage_size}", "hugetlb unavailable, normal pages used instead: %s", why)
            backing = _DEMOTED[backing]
        if not self._map(handle, size, backing, mmap.PAGESIZE):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {size} bytes ({backing.name}) failed: {os.strerror(err)}")
        if not self._prefault(handle, prefault, numa_node):  # normal pages: populate cannot run short
            self.free(handle)
            raise OSError(f"prefaulting {size} bytes failed")
        return handle

    def free(self, handle: UMBPHostBufferHandle) -> None:
        """Unmaps ``handle`` (and closes its memfd); a freed or empty handle is left as is."""
        if not isinstance(handle, UMBPHostBufferHandle):
            raise InvalidArgumentError(f"handle={handle!r} must be a UMBPHostBufferHandle")
        if handle._ptr:
            _LIBC.munmap(handle._ptr, handle._mapped_size)
        if handle._fd >= 0:
            os.close(handle._fd)
        handle._ptr, handle._mapped_size, handle._fd = 0, 0, -1

    # -- steps --------------------------------------------------------------------------------------
    @staticmethod
    def _check(size: object, backing: object, hugepage_size: object, numa_node: object) -> UMBPHostBufferBacking:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise InvalidArgumentError(f"size={size!r} must be a positive int")
        try:
            kind = UMBPHostBufferBacking(backing)  # type: ignore[arg-type]
        except ValueError:
            names = ", ".join(b.name for b in UMBPHostBufferBacking)
            raise InvalidArgumentError(f"backing={backing!r} is not a UMBPHostBufferBacking ({names})") from None
        if (
            isinstance(hugepage_size, bool)
            or not isinstance(hugepage_size, int)
            or hugepage_size < mmap.PAGESIZE
            or hugepage_size & (hugepage_size - 1)
        ):
            raise InvalidArgumentError(
                f"hugepage_size={hugepage_size!r} must be a power of two >= the page size {mmap.PAGESIZE}"
            )
        if isinstance(numa_node, bool) or not isinstance(numa_node, int) or numa_node < -1:
            raise InvalidArgumentError(f"numa_node={numa_node!r} must be -1 (no binding) or a node number >= 0")
        nodes = _numa_nodes()
        if numa_node >= 0 and nodes is not None and numa_node not in nodes:
            raise InvalidArgumentError(f"numa_node={numa_node} is not a NUMA node of this machine (nodes: {nodes})")
        return kind

    @staticmethod
    def _map(handle: UMBPHostBufferHandle, size: int, backing: UMBPHostBufferBacking, page: int) -> bool:
        mapped = _round_up(size, page)
        huge = backing in _HUGETLB
        huge_bits = (page.bit_length() - 1) << _MAP_HUGE_SHIFT if huge else 0
        fd = -1
        if backing in _SHM:
            try:
                fd = os.memfd_create("umbp_host_buffer", _MFD_CLOEXEC | (_MFD_HUGETLB | huge_bits if huge else 0))
                os.ftruncate(fd, mapped)
            except OSError:
                if fd >= 0:
                    os.close(fd)
                return False
            flags = _MAP_SHARED
        else:
            flags = _MAP_PRIVATE | _MAP_ANONYMOUS | (_MAP_HUGETLB | huge_bits if huge else 0)
        ptr = _LIBC.mmap(None, mapped, _PROT_RW, flags, fd, 0)
        if ptr in (None, _MAP_FAILED):
            if fd >= 0:
                os.close(fd)
            return False
        handle._ptr, handle._mapped_size, handle._fd = int(ptr), mapped, fd
        handle._actual_backing, handle._actual_alignment = backing, page
        return True

    def _prefault(self, handle: UMBPHostBufferHandle, prefault: bool, numa_node: int) -> bool:
        """Binds to ``numa_node`` (before any page is touched) and populates the pages; False (with
        the mapping undone) when the kernel cannot back them, which only a hugetlb pool runs into."""
        if numa_node >= 0:
            self._bind(handle, numa_node)
        if not prefault:
            return True
        if _LIBC.madvise(handle._ptr, handle._mapped_size, _MADV_POPULATE_WRITE) == 0:
            return True
        err = ctypes.get_errno()
        if handle._actual_backing in _HUGETLB:
            # Populating past the hugetlb pool fails here (EFAULT/ENOMEM) instead of as a SIGBUS on
            # a later touch: undo and let the caller demote.
            self.free(handle)
            return False
        # Kernels before 5.14 lack MADV_POPULATE_WRITE (EINVAL): touch each page instead.
        log.debug("MADV_POPULATE_WRITE failed (%s); touching each page", os.strerror(err))
        page = handle._actual_alignment
        for off in range(0, handle._mapped_size, page):
            ctypes.memset(handle._ptr + off, 0, 1)
        return True

    @staticmethod
    def _bind(handle: UMBPHostBufferHandle, node: int) -> None:
        number = _SYS_MBIND.get(platform.machine())
        if number is None:
            _warn_once(
                "mbind-arch", "numa_node=%d not applied: no mbind syscall number for %s", node, platform.machine()
            )
            return
        bits = ctypes.c_ulong * (node // (8 * ctypes.sizeof(ctypes.c_ulong)) + 1)
        mask = bits()
        mask[node // (8 * ctypes.sizeof(ctypes.c_ulong))] = 1 << (node % (8 * ctypes.sizeof(ctypes.c_ulong)))
        maxnode = len(mask) * 8 * ctypes.sizeof(ctypes.c_ulong) + 1
        rc = _LIBC.syscall(
            ctypes.c_long(number),
            ctypes.c_void_p(handle._ptr),
            ctypes.c_ulong(handle._mapped_size),
            ctypes.c_int(_MPOL_BIND),
            mask,
            ctypes.c_ulong(maxnode),
            ctypes.c_uint(0),
        )
        if rc != 0:
            err = ctypes.get_errno()
            _warn_once(
                f"mbind-{node}", "numa_node=%d not applied (mbind: %s); memory left unbound", node, os.strerror(err)
            )
