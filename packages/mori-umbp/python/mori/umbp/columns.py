# SPDX-License-Identifier: MIT
"""NOTE [columns]: the slot path's batch messages, the get path's resolves, and heartbeats'
events, as one array per field.

A put of a long chain sends each owner BatchAllocateSlots and BatchCommitSlots of up to
PEER_CHUNK keys. As repeated submessages (one AllocateSlotRequest, AllocateSlotResponse or
BatchCommitSlotEntry per key) they cost about 10 us a key to build and parse in Python, on the
client and the peer, about a tenth of a key's whole cost on a full pool (docs/benchmarks/umbp.md,
the sixth round); repeated scalars are built and read by protobuf's C code in one step.

Both forms stay: a peer reads either and answers in the form it was asked in, and says in
``GetPeerInfoResponse.columns`` that it reads columns; a client sends columns only to such a peer
(an earlier version would see an empty request). A resolve asks for columns by a flag of the
request, which an earlier peer does not know: it answers entries, and the client reads either
(on the trace's long gets, parsing one ResolveKeyResponse per key was a tenth of the client's
interpreter time). The events of a heartbeat (an ADD and a REMOVE per block on a full pool) go
the same way: a master says it reads them in ``RegisterClientResponse.event_columns``, and a
node heartbeats columns only to such a master.
Both sides work on the plain tuples below, so the two forms cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from mori.umbp.peer.events import ADD, ADD_IF_ABSENT, REMOVE, Event
from mori.umbp.rpc import pb, peer_pb


class Allocation(NamedTuple):
    """One AllocateSlotResponse, whichever form carried it."""

    outcome: int
    slot_id: int
    pages: list[int]
    page_size: int
    desc: bytes  # the packed mori-io MemoryDesc of the pages' buffer (b"": none)
    message: str
    buffer: int = 0  # the pages' PageRef.buffer_index (entries only: columns name the buffer by desc)
    # FAILED_NO_SPACE, entries only (the single AllocateSlot of a put routed again): the peer's
    # NoRoom report (NOTE [waiting for room] in mori.umbp.peer.store); the message names it too.
    room_expected: bool = False
    retry_after_ms: int = 0
    bytes_needed: int = 0
    bytes_evictable: int = 0


class Resolved(NamedTuple):
    """One ResolveKeyResponse, whichever form carried it (the fields a reader uses)."""

    found: bool
    size: int
    tier: int
    pages: list[int]
    page_size: int
    desc: bytes  # the packed mori-io MemoryDesc of the pages' buffer (b"": none)
    lease_ms: int
    ssd_lease_id: int
    buffer: int = 0  # the pages' PageRef.buffer_index (entries only: columns name the buffer by desc)


#: Not found: one row of a resolve answer.
MISSING = Resolved(False, 0, 0, [], 0, b"", 0, 0)  # never mutated


#: (key, size, tier, depth): one AllocateSlotRequest.
Claim = tuple[str, int, int, int]
#: (slot id, key, if_absent): one BatchCommitSlotEntry.
Commit = tuple[int, str, bool]


def allocate_request(claims: Sequence[Claim], columns: bool) -> Any:
    if not columns:
        return peer_pb.BatchAllocateSlotsRequest(
            entries=[peer_pb.AllocateSlotRequest(key=k, size=s, tier=t, depth=d) for k, s, t, d in claims]
        )
    keys, sizes, tiers, depths = _transpose(claims, 4)
    return peer_pb.BatchAllocateSlotsRequest(
        columns=peer_pb.AllocateColumns(keys=keys, sizes=sizes, tiers=tiers, depths=depths)
    )


def _count(req: Any, first_column: Any, limit: int) -> None:
    """ValueError when the request holds more than ``limit`` entries (checked before any is read)."""
    n = len(first_column) if req.HasField("columns") else len(req.entries)
    if n > limit:
        raise ValueError(f"entries={n} exceeds the limit {limit}")


def _transpose(rows: Sequence[tuple[Any, ...]], width: int) -> list[tuple[Any, ...]]:
    """``rows`` of ``width`` fields as ``width`` columns (empty ones for no rows); ``_rows`` undoes it."""
    return list(zip(*rows, strict=True)) if rows else [()] * width


def _rows(**columns: Sequence[Any]) -> list[Any]:
    """The columns zipped into one tuple per entry; ValueError when they differ in length."""
    lengths = {name: len(column) for name, column in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError("columns of unequal lengths (" + ", ".join(f"{n} {name}" for name, n in lengths.items()) + ")")
    return list(zip(*columns.values(), strict=True))


def _paged_rows(
    c: Any, wanted: int, what: str, **fields: Sequence[Any]
) -> list[tuple[tuple[Any, ...], list[int], bytes]]:
    """Per entry of an answer's columns ``c``: its ``fields`` (in order), its pages (the next
    page_counts[i] of page_indexes) and its buffer's descriptor. ValueError unless there are
    ``wanted`` entries (``what``), or when the columns differ in length or an index names no
    descriptor."""
    rows = _rows(page_counts=c.page_counts, desc_indexes=c.desc_indexes, **fields)
    if len(rows) != wanted:
        raise ValueError(f"answered {len(rows)} of {wanted} {what}")
    counts = list(c.page_counts)
    if sum(counts) != len(c.page_indexes):
        raise ValueError(f"page columns of unequal lengths ({sum(counts)} counted, {len(c.page_indexes)} page_indexes)")
    all_pages, descs, out, at = list(c.page_indexes), list(c.descs), [], 0
    for count, d, *row in rows:
        if d >= len(descs):
            raise ValueError(f"desc_indexes names descriptor {d} of {len(descs)}")
        out.append((tuple(row), all_pages[at : at + count], descs[d]))
        at += count
    return out


def claims_of(req: Any, limit: int) -> tuple[list[Claim], bool]:
    """The request's claims, and whether it came in columns (the answer's form); ValueError when
    it holds more than ``limit`` or its columns differ in length."""
    _count(req, req.columns.keys, limit)
    if req.HasField("columns"):
        c = req.columns
        return _rows(keys=c.keys, sizes=c.sizes, tiers=c.tiers, depths=c.depths), True
    return [(e.key, int(e.size), int(e.tier), int(e.depth)) for e in req.entries], False


def allocate_response(answers: Sequence[Allocation], columns: bool, pending_ttl_ms: int) -> Any:
    if not columns:
        out = peer_pb.AllocateSlotResponse
        return peer_pb.BatchAllocateSlotsResponse(
            entries=[
                out(
                    outcome=a.outcome,
                    message=a.message,
                    room_expected=a.room_expected,
                    retry_after_ms=a.retry_after_ms,
                    bytes_needed=a.bytes_needed,
                    bytes_evictable=a.bytes_evictable,
                )
                if a.outcome != out.SUCCESS_ALLOCATED
                else out(
                    outcome=a.outcome,
                    slot_id=a.slot_id,
                    pages=[peer_pb.PageRef(buffer_index=a.buffer, page_index=p) for p in a.pages],
                    page_size=a.page_size,
                    descs=[a.desc] if a.desc else [],
                    pending_ttl_ms=pending_ttl_ms,
                )
                for a in answers
            ]
        )
    descs: dict[bytes, int] = {}
    desc_indexes = [descs.setdefault(a.desc, len(descs)) for a in answers]
    return peer_pb.BatchAllocateSlotsResponse(
        columns=peer_pb.AllocatedColumns(
            outcomes=[a.outcome for a in answers],
            slot_ids=[a.slot_id for a in answers],
            page_counts=[len(a.pages) for a in answers],
            page_indexes=[p for a in answers for p in a.pages],
            page_sizes=[a.page_size for a in answers],
            desc_indexes=desc_indexes,
            descs=list(descs),
            messages=[a.message for a in answers],
            pending_ttl_ms=pending_ttl_ms,
        )
    )


def allocations_of(res: Any, wanted: int) -> list[Allocation]:
    """The response's answers; ValueError unless it holds exactly ``wanted`` of them (a peer that
    could not read the request's form answers with none)."""
    if res.HasField("columns"):
        c = res.columns
        rows = _paged_rows(
            c, wanted, "allocations", outcomes=c.outcomes, slot_ids=c.slot_ids, sizes=c.page_sizes, why=c.messages
        )
        return [
            Allocation(outcome, slot_id, pages, page_size, desc, why)
            for (outcome, slot_id, page_size, why), pages, desc in rows
        ]
    if len(res.entries) != wanted:
        raise ValueError(f"answered {len(res.entries)} of {wanted} allocations")
    return [
        Allocation(
            e.outcome,
            e.slot_id,
            [p.page_index for p in e.pages],
            e.page_size,
            e.descs[0] if e.descs else b"",
            e.message,
            e.pages[0].buffer_index if e.pages else 0,
            e.room_expected,
            e.retry_after_ms,
            e.bytes_needed,
            e.bytes_evictable,
        )
        for e in res.entries
    ]


def commit_request(commits: Sequence[Commit], columns: bool, **fields: Any) -> Any:
    """``fields``: the request's other fields (defer_ack, acknowledge_keys)."""
    if not columns:
        entries = [peer_pb.BatchCommitSlotEntry(slot_id=s, key=k, if_absent=a) for s, k, a in commits]
        return peer_pb.BatchCommitSlotsRequest(entries=entries, **fields)
    slot_ids, keys, if_absent = _transpose(commits, 3)
    cols = peer_pb.CommitColumns(slot_ids=slot_ids, keys=keys, if_absent=if_absent)
    return peer_pb.BatchCommitSlotsRequest(columns=cols, **fields)


def commits_of(req: Any, limit: int) -> list[Commit]:
    """The request's commits; ValueError when it holds more than ``limit`` or its columns differ
    in length."""
    _count(req, req.columns.slot_ids, limit)
    if req.HasField("columns"):
        c = req.columns
        return _rows(slot_ids=c.slot_ids, keys=c.keys, if_absent=c.if_absent)
    return [(int(e.slot_id), e.key, e.if_absent) for e in req.entries]


def resolve_entry(r: Resolved) -> Any:
    """``r`` as one ResolveKeyResponse (ResolveKey's answer, an entry of BatchResolveKeys')."""
    if not r.found:
        return peer_pb.ResolveKeyResponse(found=False)
    return peer_pb.ResolveKeyResponse(
        found=True,
        pages=[peer_pb.PageRef(buffer_index=r.buffer, page_index=p) for p in r.pages],
        page_size=r.page_size,
        descs=[r.desc] if r.desc else [],
        size=r.size,
        tier=r.tier,
        lease_ms=r.lease_ms,
        ssd_lease_id=r.ssd_lease_id,
    )


def resolve_response(rows: Sequence[Resolved], columns: bool) -> Any:
    if not columns:
        return peer_pb.BatchResolveKeysResponse(entries=[resolve_entry(r) for r in rows])
    descs: dict[bytes, int] = {}
    return peer_pb.BatchResolveKeysResponse(
        columns=peer_pb.ResolvedColumns(
            found=[r.found for r in rows],
            sizes=[r.size for r in rows],
            tiers=[r.tier for r in rows],
            page_counts=[len(r.pages) for r in rows],
            page_indexes=[p for r in rows for p in r.pages],
            page_sizes=[r.page_size for r in rows],
            desc_indexes=[descs.setdefault(r.desc, len(descs)) for r in rows],
            descs=list(descs),
            ssd_lease_ids=[r.ssd_lease_id for r in rows],
            lease_ms=[r.lease_ms for r in rows],
        )
    )


def resolutions_of(res: Any, wanted: int) -> list[Resolved]:
    """The answer's rows, from either form; ValueError unless it holds exactly ``wanted`` of them
    or when its columns differ in length."""
    if not res.HasField("columns"):
        if len(res.entries) != wanted:
            raise ValueError(f"answered {len(res.entries)} of {wanted} keys")
        return [
            Resolved(
                e.found,
                e.size,
                e.tier,
                [p.page_index for p in e.pages],
                e.page_size,
                e.descs[0] if e.descs else b"",
                e.lease_ms,
                e.ssd_lease_id,
                e.pages[0].buffer_index if e.pages else 0,
            )
            for e in res.entries
        ]
    c = res.columns
    rows = _paged_rows(
        c,
        wanted,
        "keys",
        found=c.found,
        sizes=c.sizes,
        tiers=c.tiers,
        page_sizes=c.page_sizes,
        lease_ms=c.lease_ms,
        ssd_lease_ids=c.ssd_lease_ids,
    )
    return [
        Resolved(found, size, tier, pages, page_size, desc, lease_ms, ssd)
        for (found, size, tier, page_size, lease_ms, ssd), pages, desc in rows
    ]


def event_bundle(seq: int, events: Sequence[Event], columns: bool) -> Any:
    if not columns:
        return pb.KvEventBundle(seq=seq, events=[_event(*e) for e in events])
    kinds, keys, tiers, sizes = _transpose(events, 4)
    return pb.KvEventBundle(seq=seq, columns=pb.EventColumns(kinds=kinds, keys=keys, tiers=tiers, sizes=sizes))


def _event(kind: int, key: str, tier: int, size: int) -> Any:
    if kind == ADD_IF_ABSENT:  # NOTE [direct put] in mori.umbp.master.core
        return pb.KvEvent(kind=ADD, key=key, tier=tier, size=size, if_absent=True)
    return pb.KvEvent(kind=kind, key=key, tier=tier, size=size)


def events_of(bundle: Any) -> list[Event]:
    """The bundle's events, kinds as mori.umbp.peer.events numbers them (an ADD with if_absent is
    ADD_IF_ABSENT); ValueError when its columns differ in length or name an unknown kind."""
    if not bundle.HasField("columns"):
        return [(_kind(e), e.key, int(e.tier), int(e.size)) for e in bundle.events]
    c = bundle.columns
    if any(k > ADD_IF_ABSENT for k in c.kinds):
        raise ValueError(f"event kinds must be {ADD} (ADD), {REMOVE} (REMOVE) or {ADD_IF_ABSENT} (ADD if absent)")
    return _rows(kinds=c.kinds, keys=c.keys, tiers=c.tiers, sizes=c.sizes)


def _kind(event: Any) -> int:
    kind = int(event.kind)
    return ADD_IF_ABSENT if kind == ADD and event.if_absent else kind
