# SPDX-License-Identifier: MIT
"""NOTE [columns] in mori.umbp.columns: a peer serves BatchAllocateSlots and BatchCommitSlots as
one array per field exactly as it serves them as one submessage per key, answers in the form it
was asked in, refuses columns of unequal lengths; a client sends columns only to a peer whose
GetPeerInfo says it reads them, so a peer of an earlier version still stores every block."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from conftest import PAGE, assert_reads_back, make_client, master_config

from mori.umbp import MasterServer, columns
from mori.umbp.peer.allocator import PageAllocator
from mori.umbp.peer.service import PeerServicer
from mori.umbp.peer.store import PeerStore
from mori.umbp.rpc import peer_pb

DRAM = 2
ALLOCATED = peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED


class _Pool:
    tier, page_size, buffer_index = DRAM, PAGE, 0

    def __init__(self, pages: int) -> None:
        self.capacity = pages * PAGE
        self.alloc = PageAllocator(self.capacity, PAGE)

        class Desc:
            def pack(self) -> bytes:
                return b"the pool's packed descriptor"

        self.desc = Desc()


class _Aborted(Exception):
    def __init__(self, code, details) -> None:
        super().__init__(details)
        self.code = code


class _Ctx:
    def time_remaining(self) -> float:
        return 5.0

    def abort(self, code, details):
        raise _Aborted(code, details)


def _peer(pages: int) -> tuple[PeerStore, PeerServicer]:
    store = PeerStore([_Pool(pages)], 60.0, 0.0, 64, "lru", 16, 0.9)

    def publish(keys, conditional):
        store.publish(keys)
        return True

    return store, PeerServicer(store, b"engine", publish, lambda: None, 4)


def _serve_a_full_pool(in_columns: bool) -> list[tuple]:
    """Rounds of allocations (one key in every round, so later answers for it are not
    allocations) and commits into a pool that fills, in one form; the answers' content, their
    form checked on the way."""
    store, peer = _peer(40)
    seen = []
    for r in range(6):
        claims = [(f"k{r}-{j}" if j else "again", PAGE * (1 + j % 2), DRAM, j) for j in range(12)]
        res = peer.BatchAllocateSlots(columns.allocate_request(claims, in_columns), _Ctx())
        assert res.HasField("columns") == in_columns and (len(res.entries) == 0) == in_columns
        answers = columns.allocations_of(res, len(claims))
        seen += [(a.outcome, a.slot_id, a.pages, a.page_size, a.desc, a.message) for a in answers]
        allocated = [(a, key) for a, (key, *_) in zip(answers, claims, strict=True) if a.outcome == ALLOCATED]
        commits = [(a.slot_id, key, False) for a, key in allocated]
        done = peer.BatchCommitSlots(columns.commit_request(commits, in_columns, defer_ack=False), _Ctx())
        seen.append((list(done.success), list(done.message), list(done.already_exists)))
    seen.append(sorted(store.keys()))
    return seen


def test_a_peer_answers_columns_as_it_answers_entries():
    by_entries, by_columns = _serve_a_full_pool(False), _serve_a_full_pool(True)
    assert by_columns == by_entries
    outcomes = {row[0] for row in by_entries if len(row) == 6}
    assert ALLOCATED in outcomes and peer_pb.AllocateSlotResponse.SUCCESS_ALREADY_EXISTS in outcomes
    assert len(by_entries[-1]) < 1 + 6 * 11  # the pool filled and evicted on the way


@pytest.mark.parametrize("call", ["allocate", "commit"])
def test_columns_of_unequal_lengths_are_refused(call):
    _, peer = _peer(8)
    if call == "allocate":
        req = peer_pb.BatchAllocateSlotsRequest(
            columns=peer_pb.AllocateColumns(keys=["a", "b"], sizes=[PAGE], tiers=[DRAM, DRAM], depths=[0, 1])
        )
        serve = peer.BatchAllocateSlots
    else:
        req = peer_pb.BatchCommitSlotsRequest(columns=peer_pb.CommitColumns(slot_ids=[1, 2], keys=["a"], if_absent=[]))
        serve = peer.BatchCommitSlots
    with pytest.raises(_Aborted, match="unequal lengths") as err:
        serve(req, _Ctx())
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_an_answer_of_the_wrong_shape_is_refused():
    one = columns.Allocation(ALLOCATED, 7, [3, 4], PAGE, b"d", "")
    for form in (False, True):
        res = columns.allocate_response([one], form, 1000)
        assert columns.allocations_of(res, 1)[0][:6] == one[:6]
        with pytest.raises(ValueError, match="answered 1 of 2"):
            columns.allocations_of(res, 2)
    res = columns.allocate_response([one], True, 1000)
    res.columns.desc_indexes[0] = 3
    with pytest.raises(ValueError, match="descriptor 3 of 1"):
        columns.allocations_of(res, 1)
    res = columns.allocate_response([one], True, 1000)
    res.columns.page_indexes.append(9)
    with pytest.raises(ValueError, match="unequal lengths"):
        columns.allocations_of(res, 1)


@pytest.mark.parametrize("reads_columns", [True, False], ids=["current-peer", "earlier-peer"])
def test_a_client_sends_columns_only_to_a_peer_that_reads_them(monkeypatch, reads_columns):
    """The first call to a peer goes in entries (its GetPeerInfo is asked when the wire connects);
    later ones in columns, unless the peer said it reads none (an earlier version, whose reply to
    columns would be empty). Either way every block is stored and reads back exactly."""
    forms = []
    serve_allocate, serve_commit, info = (
        PeerServicer.BatchAllocateSlots,
        PeerServicer.BatchCommitSlots,
        PeerServicer.GetPeerInfo,
    )

    def allocate(self, req, ctx):
        forms.append(("allocate", req.HasField("columns")))
        return serve_allocate(self, req, ctx)

    def commit(self, req, ctx):
        forms.append(("commit", req.HasField("columns")))
        return serve_commit(self, req, ctx)

    def peer_info(self, req, ctx):
        res = info(self, req, ctx)
        res.columns = reads_columns
        return res

    for name, method in (("BatchAllocateSlots", allocate), ("BatchCommitSlots", commit), ("GetPeerInfo", peer_info)):
        monkeypatch.setattr(PeerServicer, name, method)  # before the peer registers its handlers
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 64 * PAGE),
        make_client(master.address, "writer") as writer,
    ):
        blocks = [np.random.default_rng(i).integers(0, 256, 2 * PAGE, dtype=np.uint8) for i in range(6)]
        keys = [f"b{i}" for i in range(6)]
        for pair in (slice(0, 2), slice(2, 4), slice(4, 6)):  # puts of blocks over the inline limit
            ptrs = [int(b.ctypes.data) for b in blocks[pair]]
            assert writer.batch_put_from_ptr(keys[pair], ptrs, [2 * PAGE] * 2) == [True, True]
        assert_reads_back(writer, keys, blocks)
    assert forms[:2] == [("allocate", False), ("commit", False)]
    assert set(forms[2:]) == {("allocate", reads_columns), ("commit", reads_columns)}
