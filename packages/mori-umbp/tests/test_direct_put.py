# SPDX-License-Identifier: MIT
"""The direct put (NOTE [direct put] in mori.umbp.master.core and mori.umbp.client.pool_view): a
client places a put itself over the pool view the master gives it and sends it straight to the
owner, whose commit is an ADD-if-absent at the master. Checked here: no master route on the way;
the master indexes one of two racing writers' copies and the other hears ALREADY_EXISTS (its
owner keeps no copy); a resent bundle gets the same answer; a view that lists a node that is gone
or full falls back to the master's route in the same call; a node dying mid-batch leaves no key
reported stored that a reader cannot read."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from conftest import (
    PAGE,
    assert_died_in_commit,
    assert_reads_back,
    cluster_with_a_dying_owner,
    make_client,
    master_config,
)

from mori.umbp import MasterServer
from mori.umbp.master.core import ADD, ADD_IF_ABSENT, REMOVE, Master, MasterTiming
from mori.umbp.master.metrics import MasterMetrics
from mori.umbp.master.store import InMemoryMetadataStore, NodeInfo

pytestmark = pytest.mark.timeout(90)

DRAM = 2


def _block(seed: int, size: int = 4000) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def _routes(master: MasterServer) -> float:
    return master.metrics.rpcs.labels("BatchRoutePut")._value.get()


def _pin_view(client, *only: str) -> None:
    """Keeps ``client``'s pool view to the nodes ``only`` (a view gone stale, or two writers that
    disagree): the periodic heartbeats no longer refresh it."""
    client._hb.on_view = None
    for node in [n for n in client._view._nodes if n not in only]:
        client._view.forget(node)
    assert set(client._view._nodes) == set(only)


def _held(*owners) -> dict[str, str]:
    """key -> the node that holds it, over ``owners``."""
    held: dict[str, str] = {}
    for owner in owners:
        held.update(dict.fromkeys(owner.store.keys(), owner.node_id))
    return held


def _read(client, key: str, size: int) -> bytes | None:
    out = np.zeros(size, np.uint8)
    return out.tobytes() if client.get_into_ptr(key, out.ctypes.data, size) else None


# -- the master's decision, without gRPC ------------------------------------------------------------
def test_an_add_if_absent_is_indexed_once_and_a_resent_bundle_gets_the_same_answer():
    m = Master(InMemoryMetadataStore(), MasterTiming(), MasterMetrics())
    for node in ("a", "b"):
        m.register(NodeInfo(node, "127.0.0.1", f"{node}:1", b"", capacities={DRAM: (1000, 1000)}))
    ra = m.heartbeat("a", [(1, [(ADD_IF_ABSENT, "k", DRAM, 10)])], False, 0, {})
    rb = m.heartbeat("b", [(1, [(ADD_IF_ABSENT, "k", DRAM, 10), (ADD_IF_ABSENT, "j", DRAM, 10)])], False, 0, {})
    assert (ra.acked_seq, ra.refused) == (1, ())
    assert (rb.acked_seq, rb.refused) == (1, ("k",))  # a held k first; j was free
    assert [[loc.node_id for loc in locs] for locs in m.store.lookup(["k", "j"])] == [["a"], ["b"]]
    # The answers were lost: each node resends its bundle (with a new one) and hears the same.
    assert m.heartbeat("a", [(1, [(ADD_IF_ABSENT, "k", DRAM, 10)])], False, 0, {}).refused == ()
    rb = m.heartbeat("b", [(1, [(ADD_IF_ABSENT, "k", DRAM, 10)]), (2, [(ADD, "x", DRAM, 1)])], False, 0, {})
    assert (rb.acked_seq, rb.refused) == (2, ("k",))
    assert [loc.node_id for loc in m.store.lookup(["k"])[0]] == ["a"]
    # Once a's copy is gone, the key is absent again: b's next ADD-if-absent of it is indexed.
    m.heartbeat("a", [(2, [(REMOVE, "k", DRAM, 10)])], False, 0, {})
    assert m.heartbeat("b", [(3, [(ADD_IF_ABSENT, "k", DRAM, 10)])], False, 0, {}).refused == ()
    assert [loc.node_id for loc in m.store.lookup(["k"])[0]] == ["b"]
    # A copy on a node the master no longer counts as alive does not block the key.
    m.unregister("b")
    m.register(NodeInfo("c", "127.0.0.1", "c:1", b"", capacities={DRAM: (1000, 1000)}))
    assert m.heartbeat("c", [(1, [(ADD_IF_ABSENT, "k", DRAM, 10)])], False, 0, {}).refused == ()


@pytest.mark.parametrize("affinity", ["none", "same", "local"])
def test_the_client_places_a_batch_as_the_master_would(affinity):
    """A PoolView built from the master's own view message places a batch exactly where the
    master's route does (most_available is deterministic: ties go to the smaller node id)."""
    from mori.umbp.client.pool_view import PoolView
    from mori.umbp.master.service import MasterServicer
    from mori.umbp.rpc import pb

    m = Master(InMemoryMetadataStore(), MasterTiming(), MasterMetrics(), "most_available", affinity)
    for node, (hbm, dram) in {"a": (0, 300), "b": (100, 250), "c": (40, 250)}.items():
        caps = {DRAM: (1000, dram)} | ({1: (1000, hbm)} if hbm else {})
        m.register(NodeInfo(node, "127.0.0.1", f"{node}:1", node.encode(), capacities=caps))
    sizes = [30, 30, 60, 100, 10, 200, 5000]
    keys = [f"k{i}" for i in range(len(sizes))]
    view = PoolView("c", pb.ROUTED)
    view.update(MasterServicer(m)._pool_view())
    mine = [(r.node_id, r.tier, r.peer_address, r.engine_desc) if r else None for r in view.place(sizes)]
    routed = [
        (r.node.node_id, r.tier, r.node.peer_address, r.node.engine_desc) if r.node else None
        for r in m.route_put(keys, sizes, set(), requester="c")
    ]
    assert mine == routed
    assert len({p for p in mine if p}) > 1  # the batch did spread (or pin) over several choices


# -- against real servers ---------------------------------------------------------------------------
def test_a_put_goes_straight_to_the_owner_and_a_stored_key_is_not_copied_again():
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner-a", 64 * PAGE) as a,
        make_client(master.address, "owner-b", 64 * PAGE) as b,
        make_client(master.address, "writer") as w,
        make_client(master.address, "other-writer") as w2,
    ):
        routes = _routes(master)
        one = _block(1)
        assert w.put_from_ptr("one", one.ctypes.data, one.nbytes)
        blocks = [_block(10 + i, PAGE + 100) for i in range(6)]  # over the inline bound: the slot path
        keys = [f"s{i}" for i in range(6)]
        assert w.batch_put_from_ptr(keys, [x.ctypes.data for x in blocks], [x.nbytes for x in blocks]) == [True] * 6
        assert _routes(master) == routes  # placed by the writer: the master routed nothing
        held = _held(a, b)
        assert sorted(held) == sorted(["one", *keys])
        # Another writer puts the same keys with other bytes: each is reported stored (it exists)
        # and nothing changes, on either owner, whichever one it placed them on.
        other = _block(2)
        assert w2.put_from_ptr("one", other.ctypes.data, other.nbytes)
        again = [_block(30 + i, PAGE + 100) for i in range(6)]
        assert w2.batch_put_from_ptr(keys, [x.ctypes.data for x in again], [x.nbytes for x in again]) == [True] * 6
        assert _held(a, b) == held
        assert sorted(a.store.keys() + b.store.keys()) == sorted(held)  # one copy of each
        with make_client(master.address, "reader") as r:
            assert _read(r, "one", one.nbytes) == one.tobytes()
            for key, value in zip(keys, blocks, strict=True):
                assert _read(r, key, value.nbytes) == value.tobytes()
        # Every page the refused copies took was freed again.
        used = sum(c.store.capacities()[DRAM][0] - c.store.capacities()[DRAM][1] for c in (a, b))
        assert used == PAGE + 6 * 2 * PAGE


@pytest.mark.parametrize("size", [4000, PAGE + 1], ids=["inline", "slots"])
def test_two_writers_racing_on_one_key_through_two_owners_store_it_once(size):
    """Each writer's view holds a different owner, so every key is sent to both owners at once:
    the master indexes exactly one copy, the other owner drops its own, and both writers are
    told the key is stored; a reader gets the indexed copy's bytes, which are its writer's."""
    n = 12
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner-a", 64 * PAGE) as a,
        make_client(master.address, "owner-b", 64 * PAGE) as b,
        make_client(master.address, "writer-a") as wa,
        make_client(master.address, "writer-b") as wb,
        make_client(master.address, "reader") as r,
    ):
        _pin_view(wa, "owner-a")
        _pin_view(wb, "owner-b")
        keys = [f"race{i}" for i in range(n)]
        data = {"a": [_block(100 + i, size) for i in range(n)], "b": [_block(200 + i, size) for i in range(n)]}
        results: dict[str, list[bool]] = {}
        start = threading.Barrier(2)

        def put(name: str, client) -> None:
            start.wait()
            results[name] = [client.put_from_ptr(k, d.ctypes.data, size) for k, d in zip(keys, data[name], strict=True)]

        threads = [threading.Thread(target=put, args=(name, c)) for name, c in (("a", wa), ("b", wb))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {"a": [True] * n, "b": [True] * n}
        on_a, on_b = set(a.store.keys()), set(b.store.keys())
        assert on_a | on_b == set(keys) and not on_a & on_b  # exactly one copy of each key
        for key, locs in zip(keys, master.master.store.lookup(keys), strict=True):
            assert [loc.node_id for loc in locs] == ["owner-a" if key in on_a else "owner-b"]
            i = keys.index(key)
            assert _read(r, key, size) == data["a" if key in on_a else "b"][i].tobytes()
        for c, held in ((a, on_a), (b, on_b)):  # the dropped copies' pages are free again
            total, free = c.store.capacities()[DRAM]
            assert total - free == len(held) * (-(-size // PAGE)) * PAGE


def test_a_view_naming_a_node_that_is_gone_falls_back_to_the_route():
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "live", 64 * PAGE) as live,
        make_client(master.address, "writer") as w,
    ):
        gone = make_client(master.address, "gone", 128 * PAGE)
        w._hb.beat(want_view=True)  # the writer's view now lists both nodes
        _pin_view(w, "gone", "live")
        gone.close()  # its peer service stops: the view is stale
        routes = _routes(master)
        data = _block(3)
        assert w.put_from_ptr("k", data.ctypes.data, data.nbytes)  # placed on "gone" (most room), then routed
        assert _routes(master) == routes + 1
        assert live.store.keys() == ["k"]
        assert "gone" not in w._view._nodes  # not placed on again until the master's next view
        assert _read(w, "k", data.nbytes) == data.tobytes()
        routes = _routes(master)
        assert w.put_from_ptr("k2", data.ctypes.data, data.nbytes)
        assert _routes(master) == routes  # straight to the live node again
        assert sorted(live.store.keys()) == ["k", "k2"]


def test_a_put_placed_on_the_writer_itself_is_a_local_add_if_absent():
    """With affinity local a writer with DRAM places its puts on itself: a local copy and one
    acknowledged heartbeat; a key another node holds is refused there and dropped, reported stored."""
    with (
        MasterServer(master_config(put_affinity="local")) as master,
        make_client(master.address, "other", 64 * PAGE) as other,
        make_client(master.address, "self", 64 * PAGE) as me,
        make_client(master.address, "reader") as r,
    ):
        data = _block(6)
        assert other.put_from_ptr("theirs", data.ctypes.data, data.nbytes)  # placed on "other" itself
        assert other.store.keys() == ["theirs"]
        routes = _routes(master)
        mine = _block(7)
        assert me.put_from_ptr("mine", mine.ctypes.data, mine.nbytes)
        assert me.put_from_ptr("theirs", mine.ctypes.data, mine.nbytes)  # exists elsewhere: True
        assert _routes(master) == routes
        assert (me.store.keys(), other.store.keys()) == (["mine"], ["theirs"])
        assert me.store.capacities()[DRAM][1] == 63 * PAGE  # the refused copy's page is free again
        assert _read(r, "mine", mine.nbytes) == mine.tobytes()
        assert _read(r, "theirs", data.nbytes) == data.tobytes()


def test_an_owner_restarted_at_another_address_is_found_again():
    """The writer's view has the owner's old address; the owner restarted (same node id) on
    another port. The direct call fails, the writer asks the master's view, sees the new address,
    and routes the key without excluding that node, the only one: it is stored there."""
    with MasterServer(master_config()) as master, make_client(master.address, "writer") as w:
        old = make_client(master.address, "owner", 64 * PAGE)
        old_address = old.peer_address
        w._hb.interval_s = 3600  # no periodic view from now on: only the put's own refresh
        time.sleep(0.7)  # the wait the heartbeat thread was in (0.5 s here) ends
        assert w._hb.beat(want_view=True) and w._view.address("owner") == old_address
        old.close()
        with make_client(master.address, "owner", 64 * PAGE) as new:
            assert new.peer_address != old_address
            assert w._view.address("owner") == old_address  # stale
            routes = _routes(master)
            data = _block(5)
            assert w.put_from_ptr("k", data.ctypes.data, data.nbytes)
            assert _routes(master) == routes + 1
            assert w._view.address("owner") == new.peer_address
            assert new.store.keys() == ["k"]
            assert _read(w, "k", data.nbytes) == data.tobytes()


def test_a_view_naming_a_full_node_falls_back_to_the_route():
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "small", 2 * PAGE) as small,
        make_client(master.address, "big", 64 * PAGE) as big,
        make_client(master.address, "writer") as w,
    ):
        _pin_view(w, "small")  # a view that still shows "small" with all its room
        # Every page of "small" is held by a pending slot (another writer mid-put): nothing there
        # can be evicted to make room.
        outcome, _, _ = small.store.allocate("held", 2 * PAGE, DRAM, -1, "another-writer")
        assert outcome == "ALLOCATED"
        routes = _routes(master)
        data = _block(4)
        assert w.put_from_ptr("k", data.ctypes.data, data.nbytes)
        assert _routes(master) == routes + 1  # the owner said no room: routed past it
        assert (small.store.keys(), big.store.keys()) == ([], ["k"])
        assert _read(w, "k", data.nbytes) == data.tobytes()


@pytest.mark.parametrize("size", [4000, PAGE + 1], ids=["inline", "slots"])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_node_dying_mid_batch_leaves_no_key_reported_stored_that_is_missing(when, size):
    """A batch placed by the writer over two owners; one dies in its commit RPC (BatchPutInline,
    or BatchCommitSlots after the mori-io write), before its commits or after the master indexed
    them. Every key reported stored must read back exactly from a reader that never saw it."""
    blocks = [_block(300 + i, size) for i in range(16)]
    keys = [f"b{i}" for i in range(16)]
    with cluster_with_a_dying_owner(when, 64 * PAGE, {"node_id": "live", "capacity": 64 * PAGE}) as started:
        master, doomed, (live,), client = started
        assert set(client._view._nodes) >= {"doomed", "live"}
        done = client.batch_put_from_ptr(keys, [x.ctypes.data for x in blocks], [x.nbytes for x in blocks])
        assert_died_in_commit(doomed)  # in the batch
        assert done == [True] * 16  # the dead node's keys were routed again, to the live one
        assert sorted(live.ask("keys")) == sorted(keys)
        with make_client(master.address, "reader", 0) as reader:
            assert_reads_back(reader, keys, blocks)
