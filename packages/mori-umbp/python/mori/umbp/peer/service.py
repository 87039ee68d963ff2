# SPDX-License-Identifier: MIT
"""The UMBPPeer gRPC servicer over a ``PeerStore``.

A PageRef's ``buffer_index`` names the registered buffer its page lives in (0 DRAM, 1 the SSD
staging buffer, 2 HBM), and ``descs[0]`` is that buffer's packed mori-io MemoryDesc.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp import rpc
from mori.umbp.auth import caller_node
from mori.umbp.errors import InvalidKeyError
from mori.umbp.peer.pools import STAGING_BUFFER, PagePool
from mori.umbp.peer.store import PeerStore
from mori.umbp.peer.store_ssd import PeerBusy
from mori.umbp.rpc import PENDING_LIMIT_TAG, peer_grpc, peer_pb
from mori.umbp.types import PAGE_TIERS, UMBPTierType, check_key, tier_name


def _wait_budget(ctx: Any) -> float:
    """How long AllocateSlot may wait on another writer's key: the caller's deadline less a margin
    for the answer to reach it (NOTE [one key, many writers] in mori.umbp.peer.store)."""
    remaining = ctx.time_remaining()
    remaining = rpc.timeout_s() if remaining is None else float(remaining)
    return max(0.0, remaining - max(0.1, 0.1 * remaining))


class PeerServicer(peer_grpc.UMBPPeerServicer):
    def __init__(
        self,
        store: PeerStore,
        engine_desc: bytes,
        on_commit: Callable[[str], bool],
        on_evict: Callable[[], None],
        max_waiters: int = 4,
    ) -> None:
        self.s = store
        # Writers waiting on another writer's key hold a worker thread each; at most this many
        # wait at once (the rest are answered at once), so commits, the waits' own end, always
        # find a free worker.
        self._waiters = threading.BoundedSemaphore(max_waiters)
        self.engine_desc = engine_desc
        self.on_commit = on_commit  # ships the ADD to the master before answering; True once visible
        self.on_evict = on_evict  # wakes the heartbeat without waiting: the master is the caller

    @staticmethod
    def _pages(pool: PagePool, pages: list[int]) -> list[Any]:
        return [peer_pb.PageRef(buffer_index=pool.buffer_index, page_index=p) for p in pages]

    @staticmethod
    def _descs(pool: PagePool) -> list[bytes]:
        return [pool.desc.pack()] if pool.desc is not None else []

    def GetPeerInfo(self, req: Any, ctx: Any) -> Any:
        descs = [
            peer_pb.MemoryDescEntry(buffer_index=p.buffer_index, desc=p.desc.pack())
            for p in self.s.pools.values()
            if p.desc is not None
        ]
        dram = self.s.pool(int(UMBPTierType.DRAM))
        return peer_pb.GetPeerInfoResponse(
            engine_desc=self.engine_desc,
            dram_memory_descs=descs,
            dram_page_size=dram.page_size if dram is not None else 0,
        )

    def AllocateSlot(self, req: Any, ctx: Any) -> Any:
        out = peer_pb.AllocateSlotResponse
        try:  # the client checked already; a peer still refuses what it must never store
            check_key(req.key)
        except InvalidKeyError as exc:
            return out(outcome=out.FAILED, message=str(exc))
        if req.size == 0:
            return out(outcome=out.FAILED, message="size=0 must be positive")
        tier = int(req.tier)
        if tier not in PAGE_TIERS:
            allowed = ", ".join(t.name for t in PAGE_TIERS)
            return out(outcome=out.FAILED, message=f"tier={tier_name(tier)} is not a page tier (allowed: {allowed})")
        pool = self.s.pool(tier)
        if pool is None or pool.desc is None:
            have = ", ".join(tier_name(t) for t in self.s.capacities() if t in PAGE_TIERS) or "none"
            return out(
                outcome=out.FAILED_NO_SPACE, message=f"tier={tier_name(tier)}: this peer has no such tier (has {have})"
            )
        owner = caller_node.get()
        may_wait = self._waiters.acquire(blocking=False)
        wait_s = _wait_budget(ctx) if may_wait else 0.0
        try:
            outcome, slot_id, pages = self.s.allocate(req.key, int(req.size), tier, int(req.depth), owner, wait_s)
        finally:
            if may_wait:
                self._waiters.release()
        if outcome == "EXISTS":
            return out(outcome=out.SUCCESS_ALREADY_EXISTS)
        if outcome == "PENDING":
            return out(
                outcome=out.FAILED_PENDING,
                message=f"key {req.key!r} is held by another writer, still uncommitted after {wait_s:.2f}s",
            )
        if outcome == "LIMIT":
            ctx.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"node {owner!r} holds {self.s.max_pending_per_node} pending slots on this peer "
                f"(the limit, {PENDING_LIMIT_TAG}={self.s.max_pending_per_node}); commit or abort first",
            )
        if outcome != "ALLOCATED":
            return out(outcome=out.FAILED_NO_SPACE, message=f"{pool.alloc.available} bytes free in {tier_name(tier)}")
        return out(
            outcome=out.SUCCESS_ALLOCATED,
            slot_id=slot_id,
            pages=self._pages(pool, pages),
            page_size=pool.page_size,
            descs=self._descs(pool),
            pending_ttl_ms=int(self.s.pending_ttl_s * 1000),
        )

    def CommitSlot(self, req: Any, ctx: Any) -> Any:
        why = self.s.commit(int(req.slot_id), req.key)
        if why:
            return peer_pb.CommitSlotResponse(success=False, message=why)
        if not self.on_commit(req.key):  # stored here, but no client can be sure to see it yet
            return peer_pb.CommitSlotResponse(
                success=False, message=f"committed {req.key!r}, but the master did not acknowledge it in time"
            )
        return peer_pb.CommitSlotResponse(success=True)

    def AbortSlot(self, req: Any, ctx: Any) -> Any:
        self.s.abort(int(req.slot_id))
        return peer_pb.AbortSlotResponse()

    def ResolveKey(self, req: Any, ctx: Any) -> Any:
        block = self.s.resolve(req.key)
        if block is None:
            return self._resolve_ssd(req.key, ctx)
        pool = self.s.pools[block.tier]
        return peer_pb.ResolveKeyResponse(
            found=True,
            pages=self._pages(pool, block.pages),
            page_size=pool.page_size,
            descs=self._descs(pool),
            size=block.size,
            tier=block.tier,
            lease_ms=int(self.s.read_lease_s * 1000),
        )

    def _resolve_ssd(self, key: str, ctx: Any) -> Any:
        try:
            staged = self.s.stage_ssd(key)
        except PeerBusy as exc:  # transient: the reader retries, it must not count as a miss
            ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        if staged is None or self.s.staging is None or self.s.staging.desc is None:
            return peer_pb.ResolveKeyResponse(found=False)
        return peer_pb.ResolveKeyResponse(
            found=True,
            pages=[peer_pb.PageRef(buffer_index=STAGING_BUFFER, page_index=staged.slot)],
            page_size=self.s.staging.slot_size,
            descs=[self.s.staging.desc.pack()],
            size=staged.size,
            tier=int(UMBPTierType.SSD),
            lease_ms=int(self.s.staging.lease_s * 1000),
            ssd_lease_id=staged.lease_id,
        )

    def ReleaseSsdLease(self, req: Any, ctx: Any) -> Any:
        self.s.release_ssd(int(req.lease_id))
        return peer_pb.ReleaseSsdLeaseResponse()

    def EvictKey(self, req: Any, ctx: Any) -> Any:
        # MORI's wire rule: tiers[i] names the medium keys[i] is freed from, and is ignored
        # unless there is one per key (an older master sends none).
        tiers = [int(t) for t in req.tiers] if len(req.tiers) == len(req.keys) else []
        done = self.s.evict(list(req.keys), tiers)
        if any(freed for _, freed in done):
            self.on_evict()  # ship the REMOVEs soon so the index shrinks promptly
        return peer_pb.EvictKeyResponse(evicted=[peer_pb.EvictedKey(key=k, bytes_freed=f) for k, f in done])
