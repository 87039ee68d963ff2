# SPDX-License-Identifier: MIT
"""The UMBPPeer gRPC servicer over a ``PeerStore``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp.errors import InvalidKeyError
from mori.umbp.peer.store import PeerBusy, PeerStore
from mori.umbp.rpc import peer_grpc, peer_pb
from mori.umbp.types import ALLOCATABLE_TIERS, UMBPTierType, check_key

#: buffer_index of the SSD staging buffer in PageRefs (0 is the DRAM pool).
STAGING_BUFFER = 1


class PeerServicer(peer_grpc.UMBPPeerServicer):
    def __init__(
        self, store: PeerStore, engine_desc: bytes, on_commit: Callable[[], None], on_evict: Callable[[], None]
    ) -> None:
        self.s = store
        self.engine_desc = engine_desc
        self.on_commit = on_commit  # ships the ADD to the master before answering (read-your-writes)
        self.on_evict = on_evict  # wakes the heartbeat without waiting: the master is the caller

    def _descs(self) -> list[bytes]:
        return [self.s.desc.pack()] if self.s.desc is not None else []

    def _pages(self, pages: list[int]) -> list[Any]:
        return [peer_pb.PageRef(buffer_index=0, page_index=p) for p in pages]

    def GetPeerInfo(self, req: Any, ctx: Any) -> Any:
        descs = [peer_pb.MemoryDescEntry(buffer_index=0, desc=d) for d in self._descs()]
        return peer_pb.GetPeerInfoResponse(
            engine_desc=self.engine_desc, dram_memory_descs=descs, dram_page_size=self.s.page_size
        )

    def AllocateSlot(self, req: Any, ctx: Any) -> Any:
        out = peer_pb.AllocateSlotResponse
        try:  # the client checked already; a peer still refuses what it must never store
            check_key(req.key)
        except InvalidKeyError as exc:
            return out(outcome=out.FAILED, message=str(exc))
        if req.size == 0:
            return out(outcome=out.FAILED, message="size=0 must be positive")
        if int(req.tier) not in ALLOCATABLE_TIERS:
            return out(outcome=out.FAILED, message=f"tier={int(req.tier)} is not allocatable on this peer")
        if not self._descs():
            return out(outcome=out.FAILED_NO_SPACE, message="this peer owns no pages")
        outcome, slot_id, pages = self.s.allocate(req.key, int(req.size), int(req.tier), int(req.depth))
        if outcome == "EXISTS":
            return out(outcome=out.SUCCESS_ALREADY_EXISTS)
        if outcome == "NO_SPACE":
            return out(outcome=out.FAILED_NO_SPACE, message=f"{self.s.alloc.available} bytes free")
        return out(
            outcome=out.SUCCESS_ALLOCATED,
            slot_id=slot_id,
            pages=self._pages(pages),
            page_size=self.s.page_size,
            descs=self._descs(),
            pending_ttl_ms=int(self.s.pending_ttl_s * 1000),
        )

    def CommitSlot(self, req: Any, ctx: Any) -> Any:
        why = self.s.commit(int(req.slot_id), req.key)
        if why:
            return peer_pb.CommitSlotResponse(success=False, message=why)
        self.on_commit()
        return peer_pb.CommitSlotResponse(success=True)

    def AbortSlot(self, req: Any, ctx: Any) -> Any:
        self.s.abort(int(req.slot_id))
        return peer_pb.AbortSlotResponse()

    def ResolveKey(self, req: Any, ctx: Any) -> Any:
        block = self.s.resolve(req.key)
        if block is None:
            return self._resolve_ssd(req.key, ctx)
        return peer_pb.ResolveKeyResponse(
            found=True,
            pages=self._pages(block.pages),
            page_size=self.s.page_size,
            descs=self._descs(),
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
        done = self.s.evict(list(req.keys))
        if any(freed for _, freed in done):
            self.on_evict()  # ship the REMOVEs soon so the index shrinks promptly
        return peer_pb.EvictKeyResponse(evicted=[peer_pb.EvictedKey(key=k, bytes_freed=f) for k, f in done])
