# SPDX-License-Identifier: MIT
"""Eviction on demand (NOTE [eviction on demand] in mori.umbp.peer.store): a put that finds the
pool full evicts by the configured policy on the owner and succeeds, unless every block there stays
busy past the put's deadline (NOTE [waiting for room]); the master's timed pass is off (interval
3600 s) so only the put path evicts here."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
from conftest import (
    PAGE,
    assert_reads_back,
    count_peer_rpcs,
    make_client,
    master_config,
    member_peer_stub,
    owner_and_writer,
    random_blocks,
)

from mori.umbp import MasterServer, NoRoomError, UMBPTierType
from mori.umbp.peer.store import ROOM_POLL_S
from mori.umbp.rpc import peer_pb

OWNER_PAGES = 16
DRAM = int(UMBPTierType.DRAM)
#: UMBP_DRAM_HIGH_WM's default: an on-demand eviction leaves the tier at or under it.
HIGH = 0.9


def _used_pages(owner) -> int:
    (pool,) = owner.store.pools.values()
    return (pool.capacity - pool.alloc.available) // PAGE


def test_a_pool_at_its_high_watermark_evicts_lru_on_demand_and_no_put_fails(monkeypatch):
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "100")  # a read lease keeps its block; let them end soon
    with owner_and_writer("owner", OWNER_PAGES * PAGE, "writer", eviction_check_interval_s=3600) as (master, owner, w):
        # 0.9 x 16 = 14.4 pages: fourteen blocks fit under the watermark.
        data = dict(zip([f"k{i:03d}" for i in range(14)], random_blocks(14, 1), strict=True))
        for key, value in data.items():
            assert w.put_from_ptr(key, value.ctypes.data, PAGE)
        assert _used_pages(owner) == 14
        back = np.zeros(PAGE, np.uint8)
        assert w.get_into_ptr("k000", back.ctypes.data, PAGE)  # the owner's most recent access now
        (extra,) = random_blocks(1, 2)
        assert w.put_from_ptr("new", extra.ctypes.data, PAGE)  # past the watermark, but evictable: stored
        # One victim makes room at the watermark: k001, the least recently used (k000 was just read).
        assert sorted(owner.store.keys()) == sorted([k for k in data if k != "k001"] + ["new"])
        assert _used_pages(owner) == 14
        assert not w.exists("k001")  # the REMOVE came with the put's acknowledgement
        assert all(w.batch_exists([k for k in data if k != "k001"]))
        for key in ("new", "k000", "k013"):
            assert w.get_into_ptr(key, back.ctypes.data, PAGE)
            assert np.array_equal(back, extra if key == "new" else data[key])
        # A stream of puts (single and batched) four times the pool: every one succeeds, the pool
        # stays at the watermark, every block still there reads back whole.
        time.sleep(0.3)  # the reads' leases are over: every block is a candidate again
        stream = dict(zip([f"s{i:03d}" for i in range(64)], random_blocks(64, 3), strict=True))
        keys = list(stream)
        for key in keys[:32]:
            assert w.put_from_ptr(key, stream[key].ctypes.data, PAGE)
            assert _used_pages(owner) == 14
        for i in range(32, 64, 8):
            batch = keys[i : i + 8]
            assert w.batch_put_from_ptr(batch, [stream[k].ctypes.data for k in batch], [PAGE] * 8) == [True] * 8
            assert _used_pages(owner) == 14
        assert master.evictor.run_once() == 0  # at the watermark: the timed pass has nothing to do
        held = owner.store.keys()
        # Least recently used first: the last batch and the six heads of the one before survive
        # (a batch commits last to first, NOTE [chain order]).
        assert sorted(held) == sorted(keys[48:54] + keys[56:])
        for key in held:
            assert w.get_into_ptr(key, back.ctypes.data, PAGE)
            assert np.array_equal(back, stream[key])


def test_busy_blocks_are_skipped_and_only_an_all_busy_pool_refuses(monkeypatch, caplog):
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "20000")  # leases outlive the test
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    with owner_and_writer("owner", 4 * PAGE, "writer", eviction_check_interval_s=3600) as (_master, owner, w):
        data = random_blocks(8, 4)
        for i in range(4):
            assert w.put_from_ptr(f"b{i}", data[i].ctypes.data, PAGE)
        for key in ("b0", "b1", "b3"):  # a reader resolved these: they must not go
            assert owner.store.resolve(key) is not None
        assert w.put_from_ptr("b4", data[4].ctypes.data, PAGE)
        assert sorted(owner.store.keys()) == ["b0", "b1", "b3", "b4"]  # b2, the only idle one, went
        assert owner.store.resolve("b4") is not None
        # Every block is leased now, past the put's deadline: the put is refused at once (not
        # stored, not reported stored), and says why with a NoRoomError (NOTE [waiting for room]).
        with caplog.at_level(logging.WARNING, logger="mori.umbp.client.pool_client"):
            assert w.put_from_ptr("b5", data[5].ctypes.data, PAGE) is False
        (record,) = [r for r in caplog.records if "no peer had room" in r.getMessage()]
        assert record.getMessage().startswith(
            "put 'b5': no peer had room (tried owner) within its deadline: peer 'owner' at "
        )
        assert "no room in DRAM for 65536 bytes: 0 bytes free, 0 evictable; held by read leases 262144" in (
            record.getMessage()
        )
        error = record.args[-1]
        assert isinstance(error, NoRoomError)
        assert (error.peer, error.needed, error.evictable) == ("owner", PAGE, 0)
        assert not w.exists("b5")
        assert sorted(owner.store.keys()) == ["b0", "b1", "b3", "b4"]


def test_a_pool_leased_through_makes_a_put_wait_for_the_first_lease_to_end(monkeypatch):
    """NOTE [waiting for room] in mori.umbp.peer.store: every block of the owner is under a read
    lease when the put comes, as a request's own get leased both peers through on the `lru` trace.
    The put is refused, asked again when the soonest lease ends (within its deadline), and stored
    in the room of the least recently used block, whose lease ended first."""
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "1500")
    monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "5000")  # the put's deadline outlasts the leases
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    with owner_and_writer("owner", 4 * PAGE, "writer", eviction_check_interval_s=3600) as (_master, owner, w):
        data = random_blocks(5, 21)
        keys = [f"b{i}" for i in range(4)]
        assert w.batch_put_from_ptr(keys, [d.ctypes.data for d in data[:4]], [PAGE] * 4) == [True] * 4
        back = [np.zeros(PAGE, np.uint8) for _ in range(4)]
        assert w.batch_get_into_ptr(keys, [b.ctypes.data for b in back], [PAGE] * 4) == [True] * 4
        room = owner.store.no_room(DRAM, PAGE)
        assert (room.free, room.evictable, room.leased) == (0, 0, 4 * PAGE)
        assert room.retry_after_s is not None and 0 < room.retry_after_s <= 1.5
        assert w.put_from_ptr("new", data[4].ctypes.data, PAGE)
        # b3, the chain's tail: resolved first (NOTE [chain order]), so least recently used.
        assert sorted(owner.store.keys()) == ["b0", "b1", "b2", "new"]
        assert_reads_back(w, ["b0", "b1", "b2", "new"], [data[0], data[1], data[2], data[4]])


def test_a_pool_held_by_pending_writes_makes_a_put_wait_for_them(monkeypatch):
    """NOTE [waiting for room] in mori.umbp.peer.store: another writer's slots fill the owner and
    are never committed (it stalled). They are not evictable, but they end by themselves (here at
    their TTL), so the put is asked again until they do, and stored."""
    monkeypatch.setenv("UMBP_PENDING_SLOT_TTL_MS", "1500")
    monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "5000")  # the put's deadline outlasts the slots
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    with owner_and_writer("owner", 4 * PAGE, "writer", eviction_check_interval_s=3600) as (master, owner, w):
        ch, stalled = member_peer_stub(master.address, owner.peer_address, "stalled")
        with ch:
            claims = [peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key=f"p{i}") for i in range(4)]
            res = stalled.BatchAllocateSlots(peer_pb.BatchAllocateSlotsRequest(entries=claims), timeout=2)
        assert [e.outcome for e in res.entries] == [peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED] * 4
        room = owner.store.no_room(DRAM, PAGE)
        assert (room.free, room.evictable, room.pending, room.retry_after_s) == (0, 0, 4 * PAGE, ROOM_POLL_S)
        (block,) = random_blocks(1, 22)
        assert w.put_from_ptr("new", block.ctypes.data, PAGE)
        assert owner.store.keys() == ["new"]
        assert_reads_back(w, ["new"], [block])


@pytest.mark.parametrize("size", [PAGE, PAGE + 1], ids=["inline", "slots"])
def test_blocks_a_leased_through_peer_refuses_are_routed_again_as_one_batch(monkeypatch, caplog, size):
    """NOTE [batched re-route] in mori.umbp.client.pool_client: two full owners, one with every
    block under a read lease. A batch put placed on both finds the leased one full; its refused
    blocks go to the other owner in one BatchRoutePut and one batched put, not one route,
    AllocateSlot and CommitSlot each, and every block of the batch is stored and reads back."""
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "20000")  # leases outlive the test
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    counted = count_peer_rpcs(monkeypatch, ("AllocateSlot", "CommitSlot", "BatchPutInline", "BatchAllocateSlots"))
    pages = -(-size // PAGE)
    with (
        MasterServer(master_config(eviction_check_interval_s=3600)) as master,
        make_client(master.address, "leased", 8 * pages * PAGE) as leased,
        make_client(master.address, "idle", 8 * pages * PAGE) as idle,
        make_client(master.address, "writer") as w,
    ):
        old = random_blocks(16, 24, size)
        for i, block in enumerate(old):  # one at a time: each goes to the owner with more room
            assert w.put_from_ptr(f"old{i}", block.ctypes.data, size)
        assert len(leased.store.keys()) == len(idle.store.keys()) == 8
        held = sorted(leased.store.keys())
        for key in held:  # a reader resolved these: they must not go
            assert leased.store.resolve(key) is not None
        routes = master.metrics.rpcs.labels("BatchRoutePut")
        routes_before = routes._value.get()
        counted.clear()
        new = random_blocks(8, 25, size)
        keys = [f"new{i}" for i in range(8)]
        with caplog.at_level(logging.INFO, logger="mori.umbp.client.pool_client"):
            assert w.batch_put_from_ptr(keys, [b.ctypes.data for b in new], [size] * 8) == [True] * 8
        refused = [r for r in caplog.records if r.getMessage().startswith("peer 'leased' was full for")]
        assert len(refused) >= 2  # both owners fill up alike, so the batch is placed on both
        assert routes._value.get() == routes_before + 1
        assert counted["AllocateSlot"] == counted["CommitSlot"] == 0
        batched = "BatchPutInline" if size <= PAGE else "BatchAllocateSlots"
        assert counted[batched] == 3  # the batch's share of each owner, then the refused share again
        assert sorted(leased.store.keys()) == held
        assert sorted(idle.store.keys()) == keys
        assert_reads_back(w, keys, new)


def test_a_batch_both_leased_through_peers_refuse_waits_for_their_leases_and_is_stored(monkeypatch):
    """NOTE [batched re-route] in mori.umbp.client.pool_client: both owners full, every block under
    a read lease that ends within the put's deadline. The batch is refused by the peer it was
    placed on, then by the other one, asked again at once as a batch, and the rest wait key by key
    for the leases to end: every block is stored and reads back, and each owner keeps its size."""
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "600")
    monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "5000")  # the put's deadline outlasts the leases
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    with (
        MasterServer(master_config(eviction_check_interval_s=3600)) as master,
        make_client(master.address, "a", 4 * PAGE) as a,
        make_client(master.address, "b", 4 * PAGE) as b,
        make_client(master.address, "writer") as w,
    ):
        old = random_blocks(8, 26)
        for i, block in enumerate(old):
            assert w.put_from_ptr(f"old{i}", block.ctypes.data, PAGE)
        for owner in (a, b):
            held = owner.store.keys()
            assert len(held) == 4
            for key in held:
                assert owner.store.resolve(key) is not None
        new = random_blocks(6, 27)
        keys = [f"new{i}" for i in range(6)]
        assert w.batch_put_from_ptr(keys, [d.ctypes.data for d in new], [PAGE] * 6) == [True] * 6
        assert len(a.store.keys()) == len(b.store.keys()) == 4
        assert sorted(k for k in a.store.keys() + b.store.keys() if k.startswith("new")) == keys
        assert_reads_back(w, keys, new)


def test_many_writers_into_one_full_owner_fail_no_put(monkeypatch):
    """NOTE [waiting for room] in mori.umbp.peer.store: eight writers put batches of four fresh
    blocks into an owner of eight pages at once, no reads. Their writes in flight (pending slots,
    commits not acknowledged yet) often hold every page when an allocation comes; they are not
    evictable, but they end by themselves, so every put is stored (before, 178 and 234 of the
    1,280 blocks of two runs were refused), and every block held at the end reads back whole."""
    monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "5000")  # room waits are bounded by it
    writers, batches, batch = 8, 40, 4
    blocks = random_blocks(batch, 23)
    with owner_and_writer("owner", 8 * PAGE, "writer", eviction_check_interval_s=3600) as (master, owner, w):
        clients = [make_client(master.address, f"w{t}") for t in range(writers)]
        failed: list[str] = []

        def put(t: int) -> None:
            for i in range(batches):
                keys = [f"w{t}-{i}-{j}" for j in range(batch)]
                done = clients[t].batch_put_from_ptr(keys, [b.ctypes.data for b in blocks], [PAGE] * batch)
                failed.extend(key for key, ok in zip(keys, done, strict=True) if not ok)

        try:
            threads = [threading.Thread(target=put, args=(t,)) for t in range(writers)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            for client in clients:
                client.close()
        assert failed == []
        held = owner.store.keys()
        assert held
        assert_reads_back(w, held, [blocks[int(key.rsplit("-", 1)[1])] for key in held])


def test_prefix_aware_policy_evicts_the_deepest_block_of_the_window(monkeypatch):
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    with owner_and_writer("owner", 8 * PAGE, "writer", policy="prefix_aware_lru", eviction_check_interval_s=3600) as (
        _master,
        owner,
        w,
    ):
        data = random_blocks(9, 5)
        keys = [f"c{i}" for i in range(8)]
        ptrs = [d.ctypes.data for d in data[:8]]
        # Two chains of four: depths 0..3 each; all eight fill the owner.
        assert w.batch_put_from_ptr_with_depth(keys, ptrs, [PAGE] * 8, [0, 1, 2, 3, 0, 1, 2, 3]) == [True] * 8
        assert w.put_from_ptr("x", data[8].ctypes.data, PAGE)
        # 8/8 full: one victim, the deepest of the window: c7 and c3 have depth 3, and c7 is the
        # older (a batch commits last to first, NOTE [chain order]).
        assert sorted(owner.store.keys()) == ["c0", "c1", "c2", "c3", "c4", "c5", "c6", "x"]
        assert w.put_from_ptr("y", data[8].ctypes.data, PAGE)
        assert sorted(owner.store.keys()) == ["c0", "c1", "c2", "c4", "c5", "c6", "x", "y"]


def test_lru_evicts_a_chain_from_its_tail(monkeypatch):
    """NOTE [chain order]: a batch's keys are resolved and committed last to first, so the head of
    a chain is its most recently used block and on-demand LRU eviction takes the tail first."""
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "50")
    with owner_and_writer("owner", 8 * PAGE, "writer", eviction_check_interval_s=3600) as (_master, owner, w):
        data = random_blocks(9, 8)
        a, b = [f"a{i}" for i in range(4)], [f"b{i}" for i in range(4)]
        assert w.batch_put_from_ptr(a, [d.ctypes.data for d in data[:4]], [PAGE] * 4) == [True] * 4
        assert w.batch_put_from_ptr(b, [d.ctypes.data for d in data[4:8]], [PAGE] * 4) == [True] * 4
        back = [np.zeros(PAGE, np.uint8) for _ in range(4)]
        assert w.batch_get_into_ptr(a, [x.ctypes.data for x in back], [PAGE] * 4) == [True] * 4
        time.sleep(0.1)  # the reads' leases are over
        for i in range(3):  # three more blocks: b loses b3, b2, b1, never its head first
            assert w.put_from_ptr(f"x{i}", data[8].ctypes.data, PAGE)
            assert w.batch_exists_consecutive(b) == 3 - i
        assert w.batch_exists_consecutive(a) == 4
        assert sorted(owner.store.keys()) == sorted([*a, "b0", "x0", "x1", "x2"])


@pytest.mark.parametrize(
    ("policy", "survivors"), [("lru", ["b", "c", "d", "e"]), ("segmented_lru", ["a", "b", "d", "e"])]
)
def test_segmented_lru_evicts_a_block_never_read_before_one_read_since_its_put(monkeypatch, policy, survivors):
    """NOTE [segmented LRU] in mori.umbp.peer.lru: a and b are read (x beside them, so the two
    fit the protected segment's share), then c and d are put and never read, and d's put evicts
    x under either policy. Then e's put: LRU drops a, the least recently used; segmented LRU drops
    c, the oldest block not read since its put."""
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # evict only when full
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "50")
    with owner_and_writer("owner", 4 * PAGE, "writer", policy=policy, eviction_check_interval_s=3600) as (
        _master,
        owner,
        w,
    ):
        data = dict(zip("xabcde", random_blocks(6, 12), strict=True))
        back = np.zeros(PAGE, np.uint8)
        for key in "xab":
            assert w.put_from_ptr(key, data[key].ctypes.data, PAGE)
        for key in "ab":
            assert w.get_into_ptr(key, back.ctypes.data, PAGE) and np.array_equal(back, data[key])
        time.sleep(0.1)  # the reads' leases are over
        for key in "cd":
            assert w.put_from_ptr(key, data[key].ctypes.data, PAGE)
        assert sorted(owner.store.keys()) == ["a", "b", "c", "d"]
        assert w.put_from_ptr("e", data["e"].ctypes.data, PAGE)
        assert sorted(owner.store.keys()) == survivors
        for key in survivors:
            assert w.get_into_ptr(key, back.ctypes.data, PAGE) and np.array_equal(back, data[key])
