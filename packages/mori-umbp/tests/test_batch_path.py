# SPDX-License-Identifier: MIT
"""The batched data path (NOTE [batched data path] in mori.umbp.client.pool_client): one master
round trip and one allocate, one commit and one resolve RPC per owning peer per batch, and no key
reported stored that is missing when an owner dies in the middle of a batch."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import (
    PAGE,
    assert_died_in_commit,
    assert_reads_back,
    cluster_with_a_dying_owner,
    count_peer_rpcs,
    make_client,
    master_config,
    random_blocks,
)

from mori.umbp import InvalidArgumentError, MasterServer
from mori.umbp.client.pool_client import INLINE_GROUP_MAX_BYTES, PEER_CHUNK, PEER_STREAMS, chunk_rounds
from mori.umbp.peer.service import MAX_BATCH, PeerServicer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def counted(monkeypatch):
    """Counts the peer RPCs served in this process, per method name."""
    names = ("AllocateSlot", "CommitSlot", "ResolveKey", "BatchAllocateSlots", "BatchCommitSlots", "BatchResolveKeys")
    return count_peer_rpcs(monkeypatch, names)


def test_a_batch_costs_one_rpc_of_each_kind_per_owner(counted):
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner-a", 64 * PAGE),
        make_client(master.address, "owner-b", 64 * PAGE),
        make_client(master.address, "writer") as w,
    ):
        data = random_blocks(16, 1, 2 * PAGE + 100)  # three pages each, the last one partly used
        keys = [f"b{i}" for i in range(16)]
        size = data[0].nbytes
        routes_before = master.metrics.rpcs.labels("BatchRoutePut")._value.get()
        assert w.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [size] * 16) == [True] * 16
        # The writer places the batch itself (NOTE [direct put]): no route from the master.
        assert master.metrics.rpcs.labels("BatchRoutePut")._value.get() == routes_before
        owners = 2  # most_available spreads the batch over both owners
        assert counted == {"BatchAllocateSlots": owners, "BatchCommitSlots": owners}
        counted.clear()
        back = [np.zeros_like(d) for d in data]
        assert w.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [size] * 16) == [True] * 16
        assert counted == {"BatchResolveKeys": owners}
        assert all(np.array_equal(b, d) for b, d in zip(back, data, strict=True))
        # A key twice in one batch: stored once, both entries report it.
        (dup,) = random_blocks(1, 2)
        assert w.batch_put_from_ptr(["d", "d"], [dup.ctypes.data] * 2, [PAGE] * 2) == [True, True]
        # More keys for one owner than a peer RPC carries: chunks of 32, still all stored.
        many = random_blocks(40, 3)
        mkeys = [f"m{i}" for i in range(40)]
        assert w.batch_put_from_ptr(mkeys, [d.ctypes.data for d in many], [PAGE] * 40) == [True] * 40
        out = np.zeros(PAGE, np.uint8)
        for key, value in zip(mkeys, many, strict=True):
            assert w.get_into_ptr(key, out.ctypes.data, PAGE)
            assert np.array_equal(out, value)


@pytest.mark.parametrize("size", [PAGE, PAGE + 1], ids=["inline", "slots"])
def test_a_batch_longer_than_the_pending_cap_is_stored_whole(size, monkeypatch):
    """200 keys for one owner whose UMBP_MAX_PENDING_SLOTS_PER_NODE is one chunk (32): the client
    sends them in rounds of one 32-key chunk per owner (chunk_rounds), never two chunks at once,
    so none is refused as pending, and every block reads back."""
    monkeypatch.setenv("UMBP_MAX_PENDING_SLOTS_PER_NODE", str(PEER_CHUNK))
    pages = -(-size // PAGE)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 250 * pages * PAGE),  # under the eviction watermark
        make_client(master.address, "writer") as w,
    ):
        blocks = random_blocks(200, 5, size)
        keys = [f"long{i}" for i in range(200)]
        assert w.batch_put_from_ptr(keys, [b.ctypes.data for b in blocks], [size] * 200) == [True] * 200
        back = [np.zeros(size, np.uint8) for _ in blocks]
        assert w.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [size] * 200) == [True] * 200
        assert all(np.array_equal(b, d) for b, d in zip(back, blocks, strict=True))


def test_chunk_rounds_hold_one_chunk_per_owner_head_last():
    groups = {"a": list(range(70)), "b": list(range(100, 110))}
    rounds = chunk_rounds(groups)
    assert [sorted(r) for r in rounds] == [["a", "b"], ["a"], ["a"]]
    assert all(len(idx) <= PEER_CHUNK for r in rounds for idx in r.values())
    assert [r["a"] for r in rounds] == [list(range(64, 70)), list(range(32, 64)), list(range(0, 32))]
    assert rounds[0]["b"] == groups["b"]
    assert chunk_rounds({}) == []


def test_chunks_sent_at_once_fit_the_connections_of_a_channel():
    """NOTE [wire chunks]: with ``calls``, an owner's keys go in at most that many chunks, of at
    least PEER_CHUNK and at most MAX_BATCH keys each, head last."""
    groups = {"a": list(range(150)), "b": list(range(500, 510)), "c": list(range(1000, 6000))}
    rounds = chunk_rounds(groups, calls=4)
    per_owner = {o: [r[o] for r in rounds if o in r] for o in groups}
    assert [len(c) for c in per_owner["a"]] == [36, 38, 38, 38]  # 150 in ceil(150 / 4) = 38-key chunks
    assert per_owner["a"][-1] == list(range(38))  # the head's chunk last
    assert per_owner["b"] == [groups["b"]]  # fewer keys than PEER_CHUNK: one chunk
    assert max(len(c) for c in per_owner["c"]) == MAX_BATCH and len(per_owner["c"]) == 5
    assert sorted(i for c in per_owner["c"] for i in c) == groups["c"]


def test_a_long_get_is_resolved_over_the_wire(monkeypatch):
    """A 300-block get from one owner is resolved in at most PEER_STREAMS calls, every one over
    the wire: with 32-key calls all in flight at once, the fifth went over gRPC (NOTE [wire chunks])."""
    transports: list[str] = []
    resolve = PeerServicer.BatchResolveKeys

    def recording(self, req, ctx):
        transports.append("wire" if type(ctx).__module__ == "mori.umbp.wire" else "grpc")
        return resolve(self, req, ctx)

    monkeypatch.setattr(PeerServicer, "BatchResolveKeys", recording)
    n = 300
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", (n + 64) * PAGE),
        make_client(master.address, "reader") as r,
    ):
        data = random_blocks(n, 11)
        keys = [f"g{i}" for i in range(n)]
        assert r.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [PAGE] * n) == [True] * n
        transports.clear()
        back = [np.zeros_like(d) for d in data]
        assert r.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [PAGE] * n) == [True] * n
        assert all(np.array_equal(b, d) for b, d in zip(back, data, strict=True))
    assert transports == ["wire"] * PEER_STREAMS


# The whole batch of 16 goes to one owner: inline while it is at most INLINE_GROUP_MAX_BYTES.
@pytest.mark.parametrize("size", [INLINE_GROUP_MAX_BYTES // 16, PAGE, PAGE + 1], ids=["inline", "group", "slots"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_an_owner_dying_mid_batch_leaves_no_key_reported_stored_missing(when, size):
    """The doomed owner has the most room, so the master routes the whole batch to it; it dies in
    its commit (BatchPutInline for a share of small blocks up to INLINE_GROUP_MAX_BYTES,
    BatchCommitSlots for larger shares or blocks over INLINE_MAX_BYTES): before
    committing, or after committing with the master's acknowledgement (the index then names it
    for every key until the reaper expires it). Every key must be reported stored only where a
    get finds it, with its bytes."""
    data = random_blocks(16, 4, size)
    keys = [f"k{i}" for i in range(16)]
    live = ({"node_id": f"live-{i}", "capacity": 64 * PAGE} for i in range(2))
    with cluster_with_a_dying_owner(when, 128 * PAGE, *live) as (_, doomed, live_peers, client):
        ok = client.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [size] * 16)
        assert_died_in_commit(doomed)
        assert ok == [True] * 16  # routed again, past the dead owner
        assert sorted(k for p in live_peers for k in p.ask("keys")) == sorted(keys)
        assert_reads_back(client, keys, data)


def test_remembered_owners_skip_the_master_and_fall_back_when_wrong(counted, monkeypatch):
    """NOTE [owner cache]: a key this client put is read from its owner without BatchRouteGet; a
    key the owner no longer holds, or whose owner is gone, is found through the master."""
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "50")  # the reads' leases end before the eviction below
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner-a", 16 * PAGE) as a,
        make_client(master.address, "writer") as w,
    ):
        data = random_blocks(4, 6)
        keys = [f"o{i}" for i in range(4)]
        assert w.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [PAGE] * 4) == [True] * 4
        routes = master.metrics.rpcs.labels("BatchRouteGet")._value.get()
        counted.clear()
        back = [np.zeros(PAGE, np.uint8) for _ in keys]
        assert w.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [PAGE] * 4) == [True] * 4
        assert all(np.array_equal(b, d) for b, d in zip(back, data, strict=True))
        assert master.metrics.rpcs.labels("BatchRouteGet")._value.get() == routes  # no master round trip
        assert counted == {"BatchResolveKeys": 1}
        # The owner reports the reads to the master with its heartbeat (for the timed LRU pass).
        before = {c.key: c.last_access for c in master.master.store.candidates("owner-a", 2)}
        assert a.flush()
        after = {c.key: c.last_access for c in master.master.store.candidates("owner-a", 2)}
        assert all(after[k] > before[k] for k in keys)
        # A wrong size is refused before any byte moves, as on the routed path.
        with pytest.raises(InvalidArgumentError, match="holds 65536 bytes"):
            w.get_into_ptr("o0", back[0].ctypes.data, PAGE // 2)
        # The owner drops o1 and a second node stores it again: the remembered owner answers
        # not found, the master routes to the new one.
        time.sleep(0.1)
        assert a.store.evict(["o1"]) == [("o1", PAGE)]
        assert a.flush()
        with make_client(master.address, "owner-b", 16 * PAGE) as b:
            (other,) = random_blocks(1, 7)
            assert b.put_from_ptr("o1", other.ctypes.data, PAGE)  # b's own copy (a local put)
            assert w.get_into_ptr("o1", back[1].ctypes.data, PAGE)
            assert np.array_equal(back[1], other)
            # The first owner goes away: its remembered keys are read through the master (a miss
            # here, since nothing else holds them), never an error after the owner is gone.
            a.close()
            assert w.get_into_ptr("o2", back[2].ctypes.data, PAGE) is False
