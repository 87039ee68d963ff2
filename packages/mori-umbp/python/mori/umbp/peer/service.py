# SPDX-License-Identifier: MIT
"""The UMBPPeer gRPC servicer over a ``PeerStore``.

A PageRef's ``buffer_index`` names the registered buffer its page lives in (0 DRAM, 1 the SSD
staging buffer, 2 HBM), and ``descs[0]`` is that buffer's packed mori-io MemoryDesc.
"""

from __future__ import annotations

import ctypes
import math
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp import columns, rpc, settings
from mori.umbp.auth import caller_node
from mori.umbp.errors import InvalidKeyError
from mori.umbp.peer.pools import STAGING_BUFFER
from mori.umbp.peer.store import Block, NoRoom, PeerStore
from mori.umbp.peer.store_ssd import PeerBusy
from mori.umbp.rpc import PENDING_LIMIT_TAG, peer_grpc, peer_pb
from mori.umbp.stream import StreamSlots
from mori.umbp.types import PAGE_TIERS, UMBPTierType, all_plain_keys, check_key, tier_name

#: Entries of one batch RPC a peer serves (a client sends at most its pending-slot cap per call).
MAX_BATCH = 1024

#: NOTE [inline put]: a put of a block of at most INLINE_MAX_BYTES sends the bytes inside one
#: BatchPutInline to the owner (allocate, copy, commit and the master's acknowledgement there),
#: so it costs the master's route plus one peer round trip instead of three round trips and a
#: mori-io write. Larger blocks take the slot path, whose mori-io transfer beats gRPC's copies,
#: and so does a client's share for one peer over INLINE_GROUP_MAX_BYTES (NOTE [inline or slots]
#: in mori.umbp.client.pool_client).
#: A peer refuses an entry over INLINE_MAX_BYTES, or a request over INLINE_BATCH_MAX_BYTES (the
#: bytes of a full client chunk, under gRPC's 4 MiB message cap) before any allocation.
INLINE_MAX_BYTES = 64 << 10
INLINE_BATCH_MAX_BYTES = 32 * INLINE_MAX_BYTES

#: What _claim found, as the outcome of the two RPCs that claim pages, and for NO_SPACE what held
#: the tier (None: the peer has no such tier).
_Claim = tuple[str, int, list[int], str, NoRoom | None]
_ALLOCATE_OUTCOME = {
    "EXISTS": peer_pb.AllocateSlotResponse.SUCCESS_ALREADY_EXISTS,
    "PENDING": peer_pb.AllocateSlotResponse.FAILED_PENDING,
    "NO_SPACE": peer_pb.AllocateSlotResponse.FAILED_NO_SPACE,
    "FAILED": peer_pb.AllocateSlotResponse.FAILED,
}
_ALLOCATED = peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
_INLINE_OUTCOME = {
    "EXISTS": peer_pb.PutInlineResult.ALREADY_EXISTS,
    "PENDING": peer_pb.PutInlineResult.FAILED_PENDING,
    "NO_SPACE": peer_pb.PutInlineResult.FAILED_NO_SPACE,
    "FAILED": peer_pb.PutInlineResult.FAILED,
}


def inline_refusal(entries: list[tuple[str, int]]) -> str:
    """Why a BatchPutInline of these (key, bytes) entries is refused ('' when it is not)."""
    if len(entries) > MAX_BATCH:
        return f"entries={len(entries)} exceeds the limit {MAX_BATCH}"
    for i, (key, size) in enumerate(entries):
        if size > INLINE_MAX_BYTES:
            return (
                f"entries[{i}].data={size} bytes (key {key!r}) exceeds the inline limit "
                f"INLINE_MAX_BYTES={INLINE_MAX_BYTES}; larger blocks go through AllocateSlot"
            )
    total = sum(size for _, size in entries)
    if total > INLINE_BATCH_MAX_BYTES:
        limit = INLINE_BATCH_MAX_BYTES
        return f"data={total} bytes in one request exceeds the inline limit INLINE_BATCH_MAX_BYTES={limit}"
    return ""


#: Why a commit that was made here is not reported stored: its acknowledgement did not come.
_LATE = "committed, but the master did not acknowledge it in time"

#: Streams a peer serves at once (NOTE [heartbeat stream] in mori.umbp.stream): each holds one of
#: the peer server's workers while open; the next is refused and its client calls unary.
MAX_PEER_STREAMS = 16
#: Connections a peer's NOTE [wire] server holds at once (a thread each; each client opens at most
#: PEER_STREAMS of mori.umbp.client.pool_client); the next is closed and its client uses gRPC.
MAX_PEER_WIRE_CONNECTIONS = 64


def _refusal(outcome: str, why: str, room: NoRoom | None) -> columns.Allocation:
    """The answer to a claim that got no slot; a NO_SPACE one carries the peer's NoRoom report
    (NOTE [waiting for room] in mori.umbp.peer.store)."""
    code = _ALLOCATE_OUTCOME[outcome]
    if room is None:
        return columns.Allocation(code, 0, [], 0, b"", why)
    expected = room.retry_after_s is not None
    after_ms = math.ceil((room.retry_after_s or 0.0) * 1000)
    return columns.Allocation(code, 0, [], 0, b"", why, 0, expected, after_ms, room.needed, room.evictable)


class _FrameContext:
    """A stream's context as one frame's handler sees it: the frame's deadline is the client's
    unary one (UMBP_RPC_TIMEOUT_MS), not the stream's lifetime."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def abort(self, code: Any, details: str) -> None:
        self._ctx.abort(code, details)

    def time_remaining(self) -> None:
        return None


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
        on_commit: Callable[[list[str], bool], bool],
        on_evict: Callable[[], None],
        max_waiters: int = 4,
        on_defer: Callable[[list[str], bool], None] | None = None,
    ) -> None:
        self.s = store
        # Writers waiting on another writer's key hold a worker thread each; at most this many
        # wait at once (the rest are answered at once), so commits, the waits' own end, always
        # find a free worker.
        self._waiters = threading.BoundedSemaphore(max_waiters)
        self.engine_desc = engine_desc
        # Ships the ADDs to the master before answering; True once visible. Its flag: the commits
        # include ADD-if-absents, which wait for the master's decision whatever the flush setting.
        self.on_commit = on_commit
        self.on_evict = on_evict  # wakes the heartbeat without waiting: the master is the caller
        # NOTE [deferred acknowledgement]: a commit that does not wait for the master; its flag as
        # on_commit's. None: every commit is acknowledged (defer_ack is not served).
        self.on_defer = on_defer
        self.instance = secrets.randbits(63) | 1  # this run, in commit answers (never 0: unset)
        self._packs: dict[int, tuple[Any, bytes]] = {}  # id(MemoryDesc) -> (it, its packed bytes)
        self.streams = StreamSlots(MAX_PEER_STREAMS, "the client calls unary")
        self.wire_port = 0  # NOTE [wire] in mori.umbp.wire: set once this peer's wire server listens

    def _stream(self, bodies: Any, ctx: Any, parse: Callable[[bytes], Any], serve: Callable[[Any, Any], Any]) -> Any:
        """NOTE [heartbeat stream]: ``serve`` (a unary method) for each frame, in order; each frame
        was checked by the pool credential before it reaches here."""
        return self.streams.serve(bodies, ctx, parse, serve, _FrameContext(ctx))

    def BatchResolveKeysStream(self, bodies: Any, ctx: Any) -> Any:
        return self._stream(bodies, ctx, peer_pb.BatchResolveKeysRequest.FromString, self.BatchResolveKeys)

    def BatchPutInlineStream(self, bodies: Any, ctx: Any) -> Any:
        return self._stream(bodies, ctx, peer_pb.BatchPutInlineRequest.FromString, self.BatchPutInline)

    def BatchAllocateSlotsStream(self, bodies: Any, ctx: Any) -> Any:
        return self._stream(bodies, ctx, peer_pb.BatchAllocateSlotsRequest.FromString, self.BatchAllocateSlots)

    def BatchCommitSlotsStream(self, bodies: Any, ctx: Any) -> Any:
        return self._stream(bodies, ctx, peer_pb.BatchCommitSlotsRequest.FromString, self.BatchCommitSlots)

    def _packed(self, desc: Any) -> bytes:
        """``desc.pack()``, packed once per descriptor: every resolved key's answer carries its
        buffer's descriptor, and packing it in Python cost more than the rest of the answer."""
        hit = self._packs.get(id(desc))
        if hit is None or hit[0] is not desc:  # keyed by identity; the kept object pins the id
            hit = self._packs[id(desc)] = (desc, desc.pack())
        return hit[1]

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
            wire_port=self.wire_port,
            columns=True,  # NOTE [columns] in mori.umbp.columns
        )

    def AllocateSlot(self, req: Any, ctx: Any) -> Any:
        claim = (req.key, int(req.size), int(req.tier), int(req.depth))
        (res,) = columns.allocate_response(self._allocate_all([claim], ctx), False, self._pending_ttl_ms()).entries
        return res

    def BatchAllocateSlots(self, req: Any, ctx: Any) -> Any:
        try:  # NOTE [columns] in mori.umbp.columns: either form, answered in the same
            claims, in_columns = columns.claims_of(req, MAX_BATCH)
        except ValueError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return columns.allocate_response(self._allocate_all(claims, ctx), in_columns, self._pending_ttl_ms())

    def _pending_ttl_ms(self) -> int:
        return int(self.s.pending_ttl_s * 1000)

    def _allocate_all(self, claims: list[columns.Claim], ctx: Any) -> list[columns.Allocation]:
        """One answer per (key, size, tier, depth); the writers' wait on held keys shares one
        budget (the call's)."""
        owner = caller_node.get()
        may_wait = self._waiters.acquire(blocking=False)
        deadline = time.monotonic() + (_wait_budget(ctx) if may_wait else 0.0)
        out: list[columns.Allocation] = []
        key_limit = settings.get_int("UMBP_MAX_KEY_BYTES")  # once per call, not per key
        # All the call's keys at once (about 35 us for 300), so the claims skip the check a key.
        checked = all_plain_keys([key for key, *_ in claims], key_limit)
        self.s.expire_slots()  # once per call: the claims below skip it (expire=False)
        busy = self._make_room([(key, size, tier) for key, size, tier, _ in claims], owner)
        rooms: dict[tuple[int, int], NoRoom] = {}
        try:
            for claim in claims:
                wait_s = max(0.0, deadline - time.monotonic())
                res = self._allocate(claim, owner, wait_s, key_limit, checked, busy, rooms)
                if res is None:  # this node is at its pending cap: undo the batch's own slots
                    for done in out:
                        if done.outcome == _ALLOCATED:
                            self.s.abort(done.slot_id)
                    ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self._limit_message(owner))  # raises
                else:
                    out.append(res)
        finally:
            if may_wait:
                self._waiters.release()
        return out

    def _allocate(
        self,
        claim: columns.Claim,
        owner: str,
        wait_s: float,
        key_limit: int,
        checked: bool,
        busy: set[int],
        rooms: dict[tuple[int, int], NoRoom],
    ) -> columns.Allocation | None:
        """The answer to ``claim``; None when ``owner`` is at its pending cap. ``checked``: as
        ``_claim``'s; ``busy``: the tiers where the call's eviction pass ran out of victims;
        ``rooms``: the call's NoRoom reports."""
        tier = claim[2]
        outcome, slot_id, pages, why, room = self._claim(
            *claim, owner, wait_s, key_limit, checked, expire=False, watermark=tier not in busy, rooms=rooms
        )
        if outcome == "LIMIT":
            return None
        if outcome != "ALLOCATED":
            return _refusal(outcome, why, room)
        pool = self.s.pools[tier]
        desc = self._packed(pool.desc) if pool.desc is not None else b""
        return columns.Allocation(_ALLOCATED, slot_id, pages, pool.page_size, desc, "", pool.buffer_index)

    def _claim(
        self,
        key: str,
        size: int,
        tier: int,
        depth: int,
        owner: str,
        wait_s: float,
        key_limit: int | None = None,
        checked: bool = False,
        expire: bool = True,
        watermark: bool = True,
        rooms: dict[tuple[int, int], NoRoom] | None = None,
    ) -> _Claim:
        """(outcome, slot id, pages, why, room): outcome is ALLOCATED, EXISTS, PENDING, LIMIT
        (``owner`` is at its pending cap), NO_SPACE (with what held the tier) or FAILED (a request
        this peer must never store). ``rooms``: NoRoom reports by (tier, size) made earlier in the
        same call, reused: a report walks the tier's blocks, and a full tier refuses a batch's
        every key. ``checked``: the caller checked the key already, with the rest of its call's keys
        (``all_plain_keys``)."""
        if not checked:  # the client checked already; a peer still refuses what it must never store
            try:
                check_key(key, "key", key_limit)
            except InvalidKeyError as exc:
                return "FAILED", 0, [], str(exc), None
        if size == 0:
            return "FAILED", 0, [], "size=0 must be positive", None
        if tier not in PAGE_TIERS:
            allowed = ", ".join(t.name for t in PAGE_TIERS)
            return "FAILED", 0, [], f"tier={tier_name(tier)} is not a page tier (allowed: {allowed})", None
        pool = self.s.pool(tier)
        if pool is None or pool.desc is None:
            have = ", ".join(tier_name(t) for t in self.s.capacities() if t in PAGE_TIERS) or "none"
            return "NO_SPACE", 0, [], f"tier={tier_name(tier)}: this peer has no such tier (has {have})", None
        outcome, slot_id, pages = self.s.allocate(key, size, tier, depth, owner, wait_s, expire, watermark)
        if outcome == "PENDING":
            why = f"key {key!r} is held by another writer, still uncommitted after {wait_s:.2f}s"
            return "PENDING", 0, [], why, None
        if outcome in ("EXISTS", "LIMIT", "ALLOCATED"):
            return outcome, slot_id, pages, "", None
        room = (rooms or {}).get((tier, size)) or self.s.no_room(tier, size)  # NOTE [waiting for room]
        if rooms is not None:
            rooms[(tier, size)] = room
        return "NO_SPACE", 0, [], str(room), room

    def BatchPutInline(self, req: Any, ctx: Any) -> Any:
        """NOTE [inline put]: allocate, copy the bytes in, commit, and answer once the master
        acknowledged the ADDs; the request's size is checked before any of it."""
        entries = list(req.entries)
        datas = [e.data for e in entries]  # each read of the field is a copy of the block: once
        refusal = inline_refusal([(e.key, len(d)) for e, d in zip(entries, datas, strict=True)])
        if refusal:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, refusal)
        result = peer_pb.PutInlineResult
        owner = caller_node.get()
        may_wait = self._waiters.acquire(blocking=False)
        deadline = time.monotonic() + (_wait_budget(ctx) if may_wait else 0.0)
        answers: list[Any] = [None] * len(entries)
        slots: list[tuple[int, int]] = []  # (entry, slot id) allocated and filled by this call
        key_limit = settings.get_int("UMBP_MAX_KEY_BYTES")  # once per call, not per key
        checked = all_plain_keys([e.key for e in entries], key_limit)  # as _allocate_all's
        self.s.expire_slots()  # once per call: the claims below skip it (expire=False)
        busy = self._make_room([(e.key, len(d), int(e.tier)) for e, d in zip(entries, datas, strict=True)], owner)
        rooms: dict[tuple[int, int], NoRoom] = {}
        try:
            for i, (e, data) in enumerate(zip(entries, datas, strict=True)):
                tier = int(e.tier)
                wait_s = max(0.0, deadline - time.monotonic())
                outcome, slot_id, pages, why, _ = self._claim(
                    e.key,
                    len(data),
                    tier,
                    int(e.depth),
                    owner,
                    wait_s,
                    key_limit,
                    checked,
                    expire=False,
                    watermark=tier not in busy,
                    rooms=rooms,
                )
                if outcome == "LIMIT":  # undo this call's own slots, as BatchAllocateSlots does
                    for _, done in slots:
                        self.s.abort(done)
                    ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self._limit_message(owner))
                if outcome != "ALLOCATED":
                    answers[i] = result(outcome=_INLINE_OUTCOME[outcome], message=why)
                    continue
                try:  # from the bytes object's own buffer (kept alive by ``datas``)
                    self.s.copy_in(tier, pages, ctypes.cast(data, ctypes.c_void_p).value or 0, len(data))
                except Exception as exc:  # the slot must not outlive a failed copy
                    self.s.abort(slot_id)
                    answers[i] = result(outcome=result.FAILED, message=f"copy into tier {tier_name(tier)}: {exc}")
                    continue
                slots.append((i, slot_id))
        finally:
            if may_wait:
                self._waiters.release()
        committed = self._commit_all([(slot_id, entries[i].key, entries[i].if_absent) for i, slot_id in slots])
        for (i, _), (ok, why, exists) in zip(slots, committed, strict=True):
            outcome = (result.ALREADY_EXISTS if exists else result.STORED) if ok else result.FAILED_COMMIT
            answers[i] = result(outcome=outcome, message=why)
        caps = [rpc.pb.TierCapacity(tier=t, total=tot, available=av) for t, (tot, av) in self.s.capacities().items()]
        return peer_pb.BatchPutInlineResponse(entries=answers, tier_capacities=caps)

    def _make_room(self, entries: list[tuple[str, int, int]], owner: str) -> set[int]:
        """NOTE [batch eviction] in mori.umbp.peer.store: room for a batch's (key, size, tier)
        entries, made once per tier before the claims (which make their own if another writer
        took it meanwhile). Returns the tiers where the pass ran out of victims: their claims do
        not scan again."""
        tiers: dict[int, list[tuple[str, int]]] = {}
        for key, size, tier in entries:
            if size > 0 and tier in self.s.pools:
                tiers.setdefault(tier, []).append((key, size))
        return {tier for tier, wanted in tiers.items() if not self.s.make_room_for(tier, wanted, owner)}

    def _limit_message(self, owner: str) -> str:
        cap = self.s.max_pending_per_node
        return (
            f"node {owner!r} holds {cap} pending slots on this peer "
            f"(the limit, {PENDING_LIMIT_TAG}={cap}); commit or abort first"
        )

    def CommitSlot(self, req: Any, ctx: Any) -> Any:
        ((ok, why, _),) = self._commit_all([(int(req.slot_id), req.key, False)])
        return peer_pb.CommitSlotResponse(success=ok, message=why)

    def BatchCommitSlots(self, req: Any, ctx: Any) -> Any:
        if len(req.acknowledge_keys) > MAX_BATCH:
            n = len(req.acknowledge_keys)
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, f"acknowledge_keys={n} exceeds the limit {MAX_BATCH}")
        try:  # NOTE [columns] in mori.umbp.columns
            entries = columns.commits_of(req, MAX_BATCH)
        except ValueError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        defer = bool(req.defer_ack) and self.on_defer is not None
        acknowledged = False
        if defer:
            done = self._commit_deferred(entries)
        else:
            done = self._commit_all(entries)
            # Not after a heartbeat that failed: the master is not answering, no second wait.
            flushed = not any(why == _LATE for _, why, _ in done)
            acknowledged = flushed and self._acknowledge(list(req.acknowledge_keys))
        return peer_pb.BatchCommitSlotsResponse(
            success=[ok for ok, _, _ in done],
            message=[why for _, why, _ in done],
            already_exists=[e for *_, e in done],
            deferred=defer,
            acknowledged=acknowledged,
            instance=self.instance,
        )

    def _commit_all(self, entries: list[tuple[int, str, bool]]) -> list[tuple[bool, str, bool]]:
        """Commits each slot, then ships all their ADDs to the master in one acknowledgement.
        Per entry (ok, why not, already exists): an if_absent commit the master refused is ok and
        already exists (NOTE [direct put] in mori.umbp.peer.store)."""
        done, committed, conditional = self._commit_blocks(entries)
        whys = [why for why, _ in done]
        if committed and not self.on_commit(committed, conditional):  # stored here, but not surely visible yet
            return [(False, why or _LATE, False) for why in whys]
        return [(not why, why, block is not None and block.refused) for why, block in done]

    def _commit_blocks(self, entries: list[tuple[int, str, bool]]) -> tuple[list[Any], list[str], bool]:
        """(per entry (why not, block), the keys committed, whether any of them is if_absent)."""
        # Last to first: NOTE [chain order] in mori.umbp.peer.store.
        done = [self.s.commit_block(slot_id, key, cond) for slot_id, key, cond in reversed(entries)][::-1]
        ok = [(key, cond) for (_, key, cond), (why, _) in zip(entries, done, strict=True) if not why]
        return done, [key for key, _ in ok], any(cond for _, cond in ok)

    def _commit_deferred(self, entries: list[tuple[int, str, bool]]) -> list[tuple[bool, str, bool]]:
        """NOTE [deferred acknowledgement]: commits each slot without waiting for the master (the
        writer's later commit acknowledges them); whether an if_absent one was refused is not
        known yet, so already exists is false for all."""
        done, committed, conditional = self._commit_blocks(entries)
        if committed and self.on_defer is not None:
            self.on_defer(committed, conditional)
        return [(not why, why, False) for why, _ in done]

    def _acknowledge(self, keys: list[str]) -> bool:
        """True once the master answered for the commits of ``keys`` (earlier deferred commits of
        this writer; a heartbeat that acknowledged this call's own commits covered them already,
        as events reach the master in order, and then no heartbeat is sent)."""
        return bool(keys) and self.on_commit(keys, True)

    def AbortSlot(self, req: Any, ctx: Any) -> Any:
        self.s.abort(int(req.slot_id))
        return peer_pb.AbortSlotResponse()

    def BatchAbortSlots(self, req: Any, ctx: Any) -> Any:
        for slot_id in req.slot_ids[:MAX_BATCH]:
            self.s.abort(int(slot_id))
        return peer_pb.BatchAbortSlotsResponse(success=[True] * min(len(req.slot_ids), MAX_BATCH))

    def ResolveKey(self, req: Any, ctx: Any) -> Any:
        ((key, block),) = self.s.resolve_many([req.key])
        return columns.resolve_entry(self._resolved(key, block, ctx))

    def BatchResolveKeys(self, req: Any, ctx: Any) -> Any:
        if len(req.keys) > MAX_BATCH:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, f"keys={len(req.keys)} exceeds the limit {MAX_BATCH}")
        # NOTE [chain order]: resolved last to first, so the head of a prompt's chain (the first
        # keys) is the most recently used and the tail goes first under LRU.
        rows = [self._resolved(key, block, ctx) for key, block in self.s.resolve_many(req.keys[::-1])]
        return columns.resolve_response(rows[::-1], req.columns)  # NOTE [columns] in mori.umbp.columns

    def _resolved(self, key: str, block: Block | None, ctx: Any) -> columns.Resolved:
        """The answer for ``key``: ``block`` as resolve_many found it, else from the SSD tier."""
        if block is None:
            return self._resolved_ssd(key, ctx)
        pool = self.s.pools[block.tier]
        desc = self._packed(pool.desc) if pool.desc is not None else b""
        lease_ms = int(self.s.read_lease_s * 1000)
        return columns.Resolved(
            True, block.size, block.tier, block.pages, pool.page_size, desc, lease_ms, 0, pool.buffer_index
        )

    def _resolved_ssd(self, key: str, ctx: Any) -> columns.Resolved:
        try:
            staged = self.s.stage_ssd(key)
        except PeerBusy as exc:  # transient: the reader retries, it must not count as a miss
            ctx.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        staging = self.s.staging
        if staged is None or staging is None or staging.desc is None:
            return columns.MISSING
        return columns.Resolved(
            True,
            staged.size,
            int(UMBPTierType.SSD),
            [staged.slot],
            staging.slot_size,
            self._packed(staging.desc),
            int(staging.lease_s * 1000),
            staged.lease_id,
            STAGING_BUFFER,
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
