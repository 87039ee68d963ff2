# SPDX-License-Identifier: MIT
"""NOTE [columns] in mori.umbp.columns: a peer serves BatchAllocateSlots and BatchCommitSlots as
one array per field exactly as it serves them as one submessage per key, answers in the form it
was asked in, and refuses columns of unequal lengths and batches over MAX_BATCH; a heartbeat's
events read alike in both forms. A client sends columns only to a peer whose GetPeerInfo says it
reads them, a node heartbeats them only to a master whose registration answer says so, and with
an earlier version on the other side every block is still stored and indexed."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from conftest import PAGE, Aborted, StubContext, assert_reads_back, bare_peer, make_client, master_config

from mori.umbp import MasterServer, columns
from mori.umbp.master.service import MasterServicer
from mori.umbp.peer.events import ADD, ADD_IF_ABSENT, REMOVE
from mori.umbp.peer.service import MAX_BATCH, PeerServicer
from mori.umbp.rpc import pb, peer_pb

DRAM = 2
ALLOCATED = peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED


def _serve_a_full_pool(in_columns: bool) -> list[tuple]:
    """Rounds of allocations (one key in every round, so later answers for it are not
    allocations) and commits into a pool that fills, in one form; the answers' content, their
    form checked on the way."""
    store, peer = bare_peer(40)
    seen = []
    for r in range(6):
        claims = [(f"k{r}-{j}" if j else "again", PAGE * (1 + j % 2), DRAM, j) for j in range(12)]
        res = peer.BatchAllocateSlots(columns.allocate_request(claims, in_columns), StubContext())
        assert res.HasField("columns") == in_columns and (len(res.entries) == 0) == in_columns
        answers = columns.allocations_of(res, len(claims))
        seen += [(a.outcome, a.slot_id, a.pages, a.page_size, a.desc, a.message) for a in answers]
        allocated = [(a, key) for a, (key, *_) in zip(answers, claims, strict=True) if a.outcome == ALLOCATED]
        commits = [(a.slot_id, key, False) for a, key in allocated]
        done = peer.BatchCommitSlots(columns.commit_request(commits, in_columns, defer_ack=False), StubContext())
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
    _, peer = bare_peer(8)
    if call == "allocate":
        req = peer_pb.BatchAllocateSlotsRequest(
            columns=peer_pb.AllocateColumns(keys=["a", "b"], sizes=[PAGE], tiers=[DRAM, DRAM], depths=[0, 1])
        )
        serve = peer.BatchAllocateSlots
    else:
        req = peer_pb.BatchCommitSlotsRequest(columns=peer_pb.CommitColumns(slot_ids=[1, 2], keys=["a"], if_absent=[]))
        serve = peer.BatchCommitSlots
    with pytest.raises(Aborted, match="unequal lengths") as err:
        serve(req, StubContext())
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("in_columns", [False, True], ids=["entries", "columns"])
def test_a_batch_over_the_limit_is_refused_before_it_is_read(in_columns):
    _, peer = bare_peer(8)
    n = MAX_BATCH + 1
    calls = [
        (peer.BatchAllocateSlots, columns.allocate_request([(f"k{i}", PAGE, DRAM, 0) for i in range(n)], in_columns)),
        (peer.BatchCommitSlots, columns.commit_request([(i, f"k{i}", False) for i in range(n)], in_columns)),
    ]
    for serve, req in calls:
        with pytest.raises(Aborted, match=f"entries={n} exceeds the limit {MAX_BATCH}") as err:
            serve(req, StubContext())
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


def test_a_peer_resolves_in_columns_as_it_resolves_in_entries():
    """BatchResolveKeys asked for columns answers, row for row, what its entries answer says (a
    reader gets the same rows from either), leases and touches alike (the same victims after)."""
    answers, victims = [], []
    for form in (False, True):
        store, peer = bare_peer(16)
        claims = [(f"k{j}", PAGE * (1 + j % 3), DRAM, j) for j in range(5)]
        allocated = columns.allocations_of(
            peer.BatchAllocateSlots(columns.allocate_request(claims, True), StubContext()), len(claims)
        )
        commits = [(a.slot_id, key, False) for a, (key, *_) in zip(allocated, claims, strict=True)]
        peer.BatchCommitSlots(columns.commit_request(commits, True, defer_ack=False), StubContext())
        keys = ["k3", "gone", "k0", "k4"]
        res = peer.BatchResolveKeys(peer_pb.BatchResolveKeysRequest(keys=keys, columns=form), StubContext())
        assert res.HasField("columns") == form and (len(res.entries) == 0) == form
        answers.append(columns.resolutions_of(res, len(keys)))
        victims.append(list(store._orders[DRAM].victims()))
    assert answers[1] == answers[0]
    assert [r.found for r in answers[0]] == [True, False, True, True]
    assert not answers[0][1].found and not answers[0][1].pages and not answers[0][1].desc
    assert [len(r.pages) for r in answers[0]] == [1, 0, 1, 2] and answers[0][0].size == PAGE
    assert victims[1] == victims[0] and victims[0][-3:] == ["k4", "k0", "k3"]  # resolved last to first


def test_a_resolve_answer_of_the_wrong_shape_is_refused():
    row = columns.Resolved(True, PAGE, DRAM, [3], PAGE, b"d", 500, 0)
    res = columns.resolve_response([row, columns.MISSING], True)
    assert columns.resolutions_of(res, 2) == [row, columns.MISSING]
    with pytest.raises(ValueError, match="answered 2 of 3"):
        columns.resolutions_of(res, 3)
    res.columns.desc_indexes[0] = 5
    with pytest.raises(ValueError, match="descriptor 5 of 2"):
        columns.resolutions_of(res, 2)
    res = columns.resolve_response([row], True)
    res.columns.sizes.append(1)
    with pytest.raises(ValueError, match="unequal lengths"):
        columns.resolutions_of(res, 1)


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


EVENTS = [(ADD, "a", DRAM, PAGE), (REMOVE, "b", DRAM, PAGE), (ADD_IF_ABSENT, "c", 1, 3 * PAGE), (ADD, "d", 1, 1)]


@pytest.mark.parametrize("in_columns", [False, True], ids=["events", "columns"])
def test_event_bundles_read_alike_in_both_forms(in_columns):
    sent = columns.event_bundle(7, EVENTS, in_columns)
    got = pb.KvEventBundle.FromString(sent.SerializeToString())
    assert got.HasField("columns") == in_columns and got.seq == 7
    assert columns.events_of(got) == EVENTS
    assert columns.events_of(columns.event_bundle(8, [], in_columns)) == []


def test_event_columns_of_unequal_lengths_or_unknown_kinds_are_refused():
    bundle = columns.event_bundle(1, EVENTS, True)
    bundle.columns.sizes.append(5)
    with pytest.raises(ValueError, match="unequal lengths"):
        columns.events_of(bundle)
    bundle = columns.event_bundle(1, EVENTS, True)
    bundle.columns.kinds[1] = 3
    with pytest.raises(ValueError, match="event kinds must be"):
        columns.events_of(bundle)


@pytest.mark.parametrize("reads_columns", [True, False], ids=["current-master", "earlier-master"])
def test_a_node_heartbeats_columns_only_to_a_master_that_reads_them(monkeypatch, reads_columns):
    """A master says in its registration answer whether it reads event columns; a node heartbeats
    them only then (an earlier master would see empty bundles), and either way the master's
    index holds every block the node stored."""
    forms = []
    register, heartbeat = MasterServicer.RegisterClient, MasterServicer.Heartbeat

    def registered(self, req, ctx):
        res = register(self, req, ctx)
        res.event_columns = reads_columns
        return res

    def heard(self, req, ctx):
        forms.extend(b.HasField("columns") for b in req.bundles if b.events or b.HasField("columns"))
        return heartbeat(self, req, ctx)

    monkeypatch.setattr(MasterServicer, "RegisterClient", registered)
    monkeypatch.setattr(MasterServicer, "Heartbeat", heard)  # before the master registers its handlers
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 64 * PAGE),
        make_client(master.address, "writer") as writer,
    ):
        blocks = [np.random.default_rng(10 + i).integers(0, 256, PAGE, dtype=np.uint8) for i in range(4)]
        keys = [f"e{i}" for i in range(4)]
        assert writer.batch_put_from_ptr(keys, [int(b.ctypes.data) for b in blocks], [PAGE] * 4) == [True] * 4
        assert writer.batch_exists(keys) == [True] * 4  # the master's index, from the owner's events
        assert_reads_back(writer, keys, blocks)
    assert forms and set(forms) == {reads_columns}
