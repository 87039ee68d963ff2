# SPDX-License-Identifier: MIT
"""Moving one block between local memory and a peer's pages with mori-io (never via the master).

Local memory is either inside a ``register_memory``'d region (zero copy; host or GPU memory, so
mori-io's P2P backend moves GPU <-> GPU on one host) or goes through the client's host staging
buffer (GPU memory the caller did not register is copied there by torch). A block's pages need
not be contiguous: one batched transfer scatters (or gathers) all of them, and mori-io merges the
adjacent ones.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.io import EngineDesc, IOEngine, MemoryDesc, MemoryLocationType, StatusCode
from mori.umbp import devmem
from mori.umbp.errors import PeerUnavailableError, ValueTooLargeError


@dataclass(frozen=True)
class Region:
    ptr: int
    size: int
    desc: MemoryDesc
    device: int = devmem.HOST


@dataclass(frozen=True)
class RemotePages:
    engine_desc: bytes
    mem_desc: bytes
    pages: list[int]
    page_size: int


#: One block of a batch transfer: local pointer, bytes, where it goes (or comes from), local device.
Item = tuple[int, int, RemotePages, int]


class Mover:
    def __init__(self, engine: IOEngine, staging_size: int, timeout_ms: int) -> None:
        self.engine = engine
        self.timeout_ms = timeout_ms
        self._staging = np.zeros(max(staging_size, 1), dtype=np.uint8)
        self._staging_desc = engine.register_memory(self._staging.ctypes.data, staging_size, -1, MemoryLocationType.CPU)
        self.staging_size = staging_size
        self._staging_lock = threading.Lock()
        self._lock = threading.Lock()
        self._regions: list[Region] = []
        self._engines: dict[str, tuple[EngineDesc, bytes]] = {}  # key -> (desc, its packed bytes)
        self._known: set[bytes] = set()  # the packed engine descriptors registered now
        self._mems: dict[bytes, MemoryDesc] = {}  # packed remote memory descriptor -> unpacked
        self.last_uid = -1

    # -- registered memory ----------------------------------------------------------------------
    def register(self, ptr: int, size: int, device: int = devmem.HOST) -> None:
        """Pins [ptr, ptr+size) with mori-io (the caller checked it overlaps nothing registered)."""
        loc = MemoryLocationType.CPU if device == devmem.HOST else MemoryLocationType.GPU
        desc = self.engine.register_memory(ptr, size, device, loc)
        with self._lock:
            self._regions.append(Region(ptr, size, desc, device))

    def deregister(self, ptr: int) -> None:
        with self._lock:
            found = [r for r in self._regions if r.ptr == ptr]
            self._regions = [r for r in self._regions if r.ptr != ptr]
        for r in found:
            self.engine.deregister_memory(r.desc)

    def _region(self, ptr: int, size: int) -> Region | None:
        with self._lock:
            for r in self._regions:
                if r.ptr <= ptr and ptr + size <= r.ptr + r.size:
                    return r
        return None

    def check_fits(self, ptr: int, size: int, name: str) -> None:
        """Unregistered memory goes through staging, which bounds the value size."""
        if self._region(ptr, size) is None and size > self.staging_size:
            raise ValueTooLargeError(
                f"{name}={size} exceeds the staging buffer (UMBP_DISTRIBUTED_STAGING_BUFFER_SIZE={self.staging_size}); "
                "register_memory the buffer for zero-copy transfers of larger values"
            )

    # -- transfers ------------------------------------------------------------------------------
    def _remote(self, remote: RemotePages) -> MemoryDesc:
        # A restarted peer keeps its engine key but listens on a new port with a new secret (and
        # new GPU allocations): a descriptor that changed replaces the one mori-io knows. Known
        # descriptors are looked up by their bytes, not unpacked again (this runs per transfer).
        with self._lock:
            if remote.engine_desc not in self._known:
                engine = EngineDesc.unpack(remote.engine_desc)
                old = self._engines.get(engine.key)
                if old is not None:
                    self.engine.deregister_remote_engine(old[0])
                    self._known.discard(old[1])
                self.engine.register_remote_engine(engine)
                self._engines[engine.key] = (engine, remote.engine_desc)
                self._known.add(remote.engine_desc)
            mem = self._mems.get(remote.mem_desc)
            if mem is None:
                if len(self._mems) >= 256:  # peers come and go: keep the cache bounded
                    self._mems.clear()
                mem = self._mems[remote.mem_desc] = MemoryDesc.unpack(remote.mem_desc)
        return mem

    def write(self, ptr: int, size: int, remote: RemotePages, who: str, device: int = devmem.HOST) -> None:
        self._move(False, ptr, size, remote, who, device)

    def read(self, ptr: int, size: int, remote: RemotePages, who: str, device: int = devmem.HOST) -> None:
        self._move(True, ptr, size, remote, who, device)

    def move_many(self, is_read: bool, items: Sequence[Item], who: str) -> None:
        """Moves every (ptr, size, remote pages, device) of one peer: blocks in registered memory
        go in one mori-io batch call (one transfer per local region and remote buffer, adjacent
        pages merged by mori-io), the rest one by one through staging. Raises on any failure."""
        self.start_many(is_read, items, who).wait()

    def start_many(self, is_read: bool, items: Sequence[Item], who: str) -> Moving:
        """``move_many`` started: the registered-memory transfers are in flight when this returns,
        so a caller moving blocks of several peers overlaps them; ``wait()`` finishes the rest
        (the staged blocks) and raises on any failure."""
        groups: dict[tuple[int, bytes], tuple[MemoryDesc, MemoryDesc, list[int], list[int], list[int]]] = {}
        rest: list[Item] = []
        for ptr, size, remote, device in items:
            region = self._region(ptr, size)
            if region is None:
                rest.append((ptr, size, remote, device))
                continue
            gkey = (region.ptr, remote.mem_desc)
            group = groups.get(gkey)
            if group is None:
                group = groups[gkey] = (region.desc, self._remote(remote), [], [], [])
            _, _, loffs, roffs, sizes = group
            ps, off = remote.page_size, ptr - region.ptr
            for i, page in enumerate(remote.pages):
                n = min(ps, size - i * ps)
                loffs.append(off + i * ps)
                roffs.append(page * ps)
                sizes.append(n)
        statuses: list[Any] = []
        if groups:
            uids = [self.engine.allocate_transfer_uid() for _ in groups]
            self.last_uid = uids[-1]
            op = self.engine.batch_read if is_read else self.engine.batch_write
            g = list(groups.values())
            statuses = op(
                [x[0] for x in g], [x[2] for x in g], [x[1] for x in g], [x[3] for x in g], [x[4] for x in g], uids
            )
        return Moving(self, is_read, statuses, rest, who)

    def _wait(self, is_read: bool, statuses: Sequence[Any], rest: Sequence[Item], who: str) -> None:
        failed = ""
        for status in statuses:  # wait for all, so no late byte lands in reused memory
            status.WaitFor(self.timeout_ms * 2 + 5000)
            if status.Code() != StatusCode.SUCCESS and not failed:
                failed = f"{status.Code().name}: {status.Message()}"
        if failed:
            raise PeerUnavailableError(f"{'read from' if is_read else 'write to'} {who} failed: {failed}")
        for ptr, size, remote, device in rest:
            self._move(is_read, ptr, size, remote, who, device)

    def _move(self, is_read: bool, ptr: int, size: int, remote: RemotePages, who: str, device: int) -> None:
        rdesc = self._remote(remote)
        ps = remote.page_size
        roffs = [p * ps for p in remote.pages]
        sizes = [min(ps, size - i * ps) for i in range(len(remote.pages))]
        region = self._region(ptr, size)
        if region is not None:
            self._run(is_read, region.desc, ptr - region.ptr, roffs, sizes, rdesc, who)
            return
        with self._staging_lock:
            base = int(self._staging.ctypes.data)
            if not is_read:
                devmem.copy(base, devmem.HOST, ptr, device, size)
            self._run(is_read, self._staging_desc, 0, roffs, sizes, rdesc, who)
            if is_read:
                devmem.copy(ptr, device, base, devmem.HOST, size)

    def _run(
        self,
        is_read: bool,
        local: MemoryDesc,
        offset: int,
        roffs: list[int],
        sizes: list[int],
        rdesc: MemoryDesc,
        who: str,
    ) -> None:
        loffs = [offset + sum(sizes[:i]) for i in range(len(sizes))]
        uid = self.engine.allocate_transfer_uid()
        self.last_uid = uid  # a TCP target files its inbound status under it (P2P leaves none)
        op = self.engine.batch_read if is_read else self.engine.batch_write
        (status,) = op([local], [loffs], [rdesc], [roffs], [sizes], [uid])
        # mori-io fails a transfer whose peer is silent past op_timeout_ms (set to our timeout), so
        # this wait is bounded; waiting for the final state keeps late bytes out of reused memory.
        status.WaitFor(self.timeout_ms * 2 + 5000)
        if status.Code() != StatusCode.SUCCESS:
            verb = "read from" if is_read else "write to"
            raise PeerUnavailableError(f"{verb} {who} failed: {status.Code().name}: {status.Message()}")

    def close(self) -> None:
        with self._lock:
            regions, self._regions = self._regions, []
        for r in regions:
            self.engine.deregister_memory(r.desc)
        self.engine.deregister_memory(self._staging_desc)


class Moving:
    """The transfers ``Mover.start_many`` started; ``wait()`` once (it raises on any failure)."""

    def __init__(self, mover: Mover, is_read: bool, statuses: Sequence[Any], rest: Sequence[Item], who: str) -> None:
        self._mover, self._is_read, self._statuses, self._rest, self.who = mover, is_read, statuses, rest, who

    def wait(self) -> None:
        self._mover._wait(self._is_read, self._statuses, self._rest, self.who)
