# SPDX-License-Identifier: MIT
"""A long batch put on a full pool: room made once per batch call (NOTE [batch eviction] in
mori.umbp.peer.store) and the master's acknowledgement waited for once per owner and batch
(NOTE [deferred acknowledgement] in mori.umbp.client.pool_client). Every key reported stored
reads back byte for byte, the victims are the policy's, and an owner dying before the
acknowledgement leaves no key reported stored that is missing."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import (
    PAGE,
    StubPool,
    assert_died_in_commit,
    assert_reads_back,
    cluster_with_a_dying_owner,
    owner_and_writer,
    random_blocks,
)

from mori.umbp.client.pool_client import PEER_CHUNK
from mori.umbp.peer.lru import EvictionOrder
from mori.umbp.peer.service import MAX_BATCH

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("policy", ["lru", "prefix_aware_lru", "segmented_lru"])
def test_victims_are_what_victim_names_one_eviction_after_another(policy):
    rng = random.Random(7)
    for _ in range(50):
        order = EvictionOrder(policy, window=rng.randint(1, 6))
        for i in range(rng.randint(0, 40)):
            order.add(f"k{i}", rng.randint(-1, 8))
        for _ in range(10):
            order.touch(f"k{rng.randint(0, 40)}")
        busy = {f"k{rng.randint(0, 40)}" for _ in range(rng.randint(0, 8))}
        # The reference: victim() with each pick evicted before the next one.
        reference, copy = [], EvictionOrder(policy, order.window)
        for key in [*order._order, *order._protected]:  # eviction order, one segment after the other
            copy.add(key, order.depth(key))
        while (key := copy.victim(busy)) is not None:
            reference.append(key)
            copy.remove(key)
        assert list(order.victims(busy)) == reference


def _used_pages(owner) -> int:
    (pool,) = owner.store.pools.values()
    return (pool.capacity - pool.alloc.available) // PAGE


def test_a_long_batch_on_a_full_pool_evicts_by_lru_and_every_key_reported_stored_reads_back():
    # 48 pages at the 0.9 watermark hold 43 blocks. The batch of 45 one-page blocks (a batch is
    # placed within the pool's capacity) is more than a peer takes inline, so it goes by slots in
    # two rounds (13 keys, then 32: last chunk first); the first round's commits wait for the
    # last one's acknowledgement, unpublished and so not evictable until then, so the last round
    # evicts the old blocks and then, after one heartbeat publishes the first round's (the
    # store's flush_unpublished), the batch's own tail.
    with owner_and_writer("owner", 48 * PAGE, "writer") as (_master, owner, w):
        old = random_blocks(43, 1)
        okeys = [f"old{i}" for i in range(43)]
        assert w.batch_put_from_ptr(okeys[:20], [b.ctypes.data for b in old[:20]], [PAGE] * 20) == [True] * 20
        assert w.batch_put_from_ptr(okeys[20:], [b.ctypes.data for b in old[20:]], [PAGE] * 23) == [True] * 23
        assert _used_pages(owner) == 43
        new = random_blocks(45, 2)
        keys = [f"new{i}" for i in range(45)]
        assert len(keys) > PEER_CHUNK
        assert w.batch_put_from_ptr(keys, [b.ctypes.data for b in new], [PAGE] * 45) == [True] * 45
        # Plain LRU over a chain committed last to first (NOTE [chain order]): every old block went,
        # then the batch's tail; its head, the 43 blocks that fit, stays.
        assert sorted(owner.store.keys()) == sorted(keys[:43])
        assert _used_pages(owner) == 43
        assert owner.store.unpublished() == []
        assert w.batch_exists(keys) == [True] * 43 + [False] * 2
        assert not any(w.batch_exists(okeys))
        back = [np.zeros(PAGE, np.uint8) for _ in range(43)]
        assert w.batch_get_into_ptr(keys[:43], [b.ctypes.data for b in back], [PAGE] * 43) == [True] * 43
        assert all(np.array_equal(b, d) for b, d in zip(back, new[:43], strict=True))


def test_a_batch_of_more_keys_than_a_peer_acknowledges_at_once_is_stored_whole(monkeypatch):
    """1,100 blocks to one owner: 35 slot rounds whose commits defer their acknowledgement. The
    writer used to name every deferred key in the last round's commit, past the peer's limit of
    MAX_BATCH acknowledge_keys, and the put failed with InvalidArgumentError (the `lru` bench
    with one 48 MiB peer). Now a round's commit acknowledges the deferred keys before they would
    pass the limit: no call names more, every key is reported stored and reads back whole."""
    from mori.umbp.peer.service import PeerServicer

    n, size = 1100, 4096  # by slots: 4 KiB blocks, far over a peer's inline share
    deferred, acknowledged = [], []  # per call: keys committed deferred, keys acknowledged
    commit = PeerServicer.BatchCommitSlots

    def counting(self, req, ctx):
        if req.defer_ack:
            deferred.append(len(req.entries) or len(req.columns.keys))
        if req.acknowledge_keys:
            acknowledged.append(len(req.acknowledge_keys))
        return commit(self, req, ctx)

    monkeypatch.setattr(PeerServicer, "BatchCommitSlots", counting)
    with owner_and_writer("owner", 1280 * PAGE, "writer") as (_master, owner, w):
        data = random_blocks(n, 11, size)
        keys = [f"k{i}" for i in range(n)]
        assert n > MAX_BATCH
        assert w.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [size] * n) == [True] * n
        assert len(acknowledged) >= 2 and max(acknowledged) <= MAX_BATCH  # acknowledged on the way too
        assert sum(acknowledged) == sum(deferred)  # every deferred commit acknowledged once
        assert len(owner.store.keys()) == n
        assert owner.store.unpublished() == []
        back = [np.zeros(size, np.uint8) for _ in range(n)]
        assert w.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [size] * n) == [True] * n
        assert all(np.array_equal(b, d) for b, d in zip(back, data, strict=True))


def test_batch_room_is_the_per_key_eviction_of_the_same_policy():
    """make_room_for evicts, in one pass, the blocks that allocating the keys one by one (one
    eviction pass each) evicts, for prefix_aware_lru's window too."""
    from mori.umbp.peer.store import PeerStore

    def filled() -> PeerStore:
        store = PeerStore([StubPool(20)], 60.0, 0.0, 64, "prefix_aware_lru", 4, 0.9)
        for i in range(18):  # 0.9 x 20 pages
            outcome, slot, _ = store.allocate(f"b{i}", PAGE, 2, depth=(i * 7) % 5)
            assert outcome == "ALLOCATED" and store.commit(slot, f"b{i}") == ""
        store.publish([f"b{i}" for i in range(18)])
        return store

    batch, per_key = filled(), filled()
    wanted = [(f"n{i}", PAGE) for i in range(6)]
    batch.make_room_for(2, wanted)
    for key, size in wanted:
        assert batch.allocate(key, size, 2)[0] == "ALLOCATED"
        assert per_key.allocate(key, size, 2)[0] == "ALLOCATED"
    assert sorted(batch.keys()) == sorted(per_key.keys())
    assert len(batch.keys()) == 12


def test_a_batch_pass_that_runs_out_of_victims_is_not_repeated_per_key(monkeypatch):
    """Every stored block is under a read lease: the batch's pass finds nothing to evict
    (make_room_for is False), so its allocations take the free pages past the watermark without
    scanning the tier again per key, and scan only once no page is free."""
    from mori.umbp.peer.store import PeerStore

    store = PeerStore([StubPool(20)], 60.0, 60.0, 64, "lru", 4, 0.9)
    held = [f"b{i}" for i in range(18)]  # 0.9 x 20 pages
    for key in held:
        outcome, slot, _ = store.allocate(key, PAGE, 2)
        assert outcome == "ALLOCATED" and store.commit(slot, key) == ""
    store.publish(held)
    for key in held:
        assert store.resolve(key) is not None  # leased for 60 s: busy
    scans = []
    scan = PeerStore._make_room_pages
    monkeypatch.setattr(PeerStore, "_make_room_pages", lambda self, *a: scans.append(a) or scan(self, *a))

    assert store.make_room_for(2, [("n0", PAGE), ("n1", PAGE), ("n2", PAGE)]) is False
    assert len(scans) == 1
    assert [store.allocate(k, PAGE, 2, watermark=False)[0] for k in ("n0", "n1")] == ["ALLOCATED"] * 2
    assert len(scans) == 1  # past the watermark, from free pages, no second look
    assert store.allocate("n2", PAGE, 2, watermark=False)[0] == "NO_SPACE"  # none free: it looked
    assert len(scans) == 2
    assert sorted(store.keys()) == sorted(held)  # nothing leased was evicted
    assert store.pools[2].alloc.available == 0  # all 20 pages in use


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_owner_dying_before_acknowledging_deferred_commits_leaves_no_key_reported_stored_missing(when):
    """The doomed owner, with the most room, takes the whole 80-key batch by slots: two rounds
    commit without the master's acknowledgement, and it dies in the last round's commit, before
    committing or after the acknowledgement but before answering. The deferred keys must not be
    reported stored on it: every key is put again on the live peers and reads back whole."""
    data = random_blocks(80, 9, PAGE + 1)  # slots: over the inline limit
    keys = [f"d{i}" for i in range(80)]
    live = ({"node_id": f"live-{i}", "capacity": 200 * PAGE} for i in range(2))
    with cluster_with_a_dying_owner(when, 400 * PAGE, *live) as (_, doomed, live_peers, client):
        ok = client.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [PAGE + 1] * 80)
        assert_died_in_commit(doomed)  # in its last commit
        assert ok == [True] * 80
        assert sorted(k for p in live_peers for k in p.ask("keys")) == sorted(keys)
        assert_reads_back(client, keys, data)


def test_a_peer_that_acknowledges_every_commit_still_stores_a_long_batch(monkeypatch):
    """A peer of an earlier version ignores defer_ack and acknowledge_keys (here: one without
    on_defer, that never reports an acknowledgement) and answers every commit acknowledged,
    deferred false: the writer reports those keys stored at once, with no key put again."""
    from mori.umbp.client import pool_client

    class OlderPeer(pool_client.PeerServicer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.on_defer = None

        def _acknowledge(self, keys):
            return False

    monkeypatch.setattr(pool_client, "PeerServicer", OlderPeer)
    with owner_and_writer("owner", 128 * PAGE, "writer") as (master, owner, w):
        data = random_blocks(100, 3)
        keys = [f"o{i}" for i in range(100)]
        routes = master.metrics.rpcs.labels("BatchRoutePut")._value.get()
        assert w.batch_put_from_ptr(keys, [b.ctypes.data for b in data], [PAGE] * 100) == [True] * 100
        assert master.metrics.rpcs.labels("BatchRoutePut")._value.get() == routes  # none put again
        assert owner.store.unpublished() == []
        back = [np.zeros(PAGE, np.uint8) for _ in range(100)]
        assert w.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [PAGE] * 100) == [True] * 100
        assert all(np.array_equal(b, d) for b, d in zip(back, data, strict=True))


def test_two_writers_of_long_batches_on_a_full_pool_fail_no_put():
    """Two threads put 40-block batches (two slot rounds each, the first deferred) into one full
    owner at once: each one's deferred commits wait unpublished while the other evicts, and no
    put fails (an allocation that finds only unacknowledged commits has them acknowledged, then
    evicts); every block still held reads back whole."""
    import threading

    with owner_and_writer("owner", 64 * PAGE, "writer") as (_master, owner, w):
        fill = random_blocks(57, 4)  # 0.9 x 64 pages
        fkeys = [f"f{i}" for i in range(57)]
        for i in range(0, 57, 19):
            chunk = fkeys[i : i + 19]
            assert w.batch_put_from_ptr(chunk, [b.ctypes.data for b in fill[i : i + 19]], [PAGE] * 19) == [True] * 19
        data = {
            f"t{t}-{b}-{i}": block
            for t in range(2)
            for b in range(3)
            for i, block in enumerate(random_blocks(40, 10 + 3 * t + b))
        }
        results: list[list[bool]] = []
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                for b in range(3):
                    keys = [f"t{t}-{b}-{i}" for i in range(40)]
                    results.append(w.batch_put_from_ptr(keys, [data[k].ctypes.data for k in keys], [PAGE] * 40))
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert not errors
        assert results == [[True] * 40] * 6
        held = owner.store.keys()
        # Not always at the watermark (57): an allocation that finds every block busy (the other
        # writer's commits in flight) fills past it, as it did before deferred commits.
        assert _used_pages(owner) == len(held) <= 64
        back = np.zeros(PAGE, np.uint8)
        for key in held:
            assert w.get_into_ptr(key, back.ctypes.data, PAGE)
            assert np.array_equal(back, data[key] if key in data else fill[fkeys.index(key)])
