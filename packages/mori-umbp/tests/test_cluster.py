# SPDX-License-Identifier: MIT
"""A real cluster on loopback: the ``mori-umbp-master`` script, three peer processes, and this
process as a client that owns no pages. Every byte read back is compared with what was put."""

from __future__ import annotations

import logging
import os
import signal
import time

import numpy as np
import pytest
from conftest import PAGE, MasterProcess, running_cluster, wait_for

from mori.umbp import InvalidKeyError, MasterUnavailableError, PeerUnavailableError
from mori.umbp.rpc import peer_pb

pytestmark = pytest.mark.timeout(90)
PEER_BYTES = 64 * PAGE


@pytest.fixture
def cluster():
    with running_cluster("reader", *({"node_id": f"peer-{i}", "capacity": PEER_BYTES} for i in range(3))) as started:
        yield started


def blocks(n: int, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]


def test_put_get_across_three_peers(cluster):
    _, peers, client = cluster
    size = PAGE * 2 + 123  # not page aligned: the last page is partial
    data = blocks(24, size, 1)
    keys = [f"{'ab' * 32}_{i}_k" for i in range(24)]
    assert client.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [size] * 24) == [True] * 24
    # Data lives on the peers (most-available spreads it), none on the client or the master.
    owned = {p.node_id: p.ask("keys") for p in peers}
    assert sorted(k for ks in owned.values() for k in ks) == sorted(keys)
    assert all(owned.values()), owned
    out = [np.zeros(size, np.uint8) for _ in keys]
    assert client.batch_get_into_ptr(keys, [o.ctypes.data for o in out], [size] * 24) == [True] * 24
    for d, o in zip(data, out, strict=True):
        assert np.array_equal(d, o)
    assert client.batch_exists([*keys, "missing"]) == [True] * 24 + [False]
    assert client.batch_exists_consecutive([keys[0], keys[1], "missing", keys[2]]) == 2
    with pytest.raises(InvalidKeyError, match=r"keys\[2\]"):
        client.batch_exists_consecutive([keys[0], "missing", "bad key"])
    miss = np.zeros(size, np.uint8)
    assert client.get_into_ptr("missing", miss.ctypes.data, size) is False


def test_first_writer_wins_and_registered_memory(cluster):
    _, peers, client = cluster
    pool = np.zeros(8 * PAGE, np.uint8)  # a registered KV pool: zero-copy puts and gets
    client.register_memory(pool.ctypes.data, pool.nbytes)
    first, second = blocks(2, PAGE, 2)
    pool[:PAGE] = first
    assert client.put_from_ptr("dedup", pool.ctypes.data, PAGE)
    pool[:PAGE] = second
    assert client.put_from_ptr("dedup", pool.ctypes.data, PAGE)  # a no-op that returns True
    assert sum("dedup" in p.ask("keys") for p in peers) == 1
    pool[PAGE : 2 * PAGE] = 0
    assert client.get_into_ptr("dedup", pool.ctypes.data + PAGE, PAGE)
    assert np.array_equal(pool[PAGE : 2 * PAGE], first)


def test_peer_dying_mid_put_leaves_no_visible_block(cluster, caplog):
    _, peers, client = cluster
    (data,) = blocks(1, 3 * PAGE, 3)
    (route,) = client._master.batch_route_put(["half"], [data.nbytes])
    victim = next(p for p in peers if p.node_id == route.node_id)
    stub = client._peer(route.peer_address)
    slot = stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=data.nbytes, tier=route.tier, key="half"), timeout=2)
    assert slot.outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
    victim.kill()  # after allocation, before the write and the commit
    from mori.umbp.client.transfer import RemotePages

    remote = RemotePages(route.engine_desc, slot.descs[0], [p.page_index for p in slot.pages], slot.page_size)
    with pytest.raises(PeerUnavailableError, match="write to"):
        client._mover.write(data.ctypes.data, data.nbytes, remote, "victim")
    assert not client.exists("half")
    # The master still routes to the dead peer (its reported free bytes are the most); the put
    # finds it dead, routes again without it and lands whole on a live one.
    with caplog.at_level(logging.WARNING, logger="mori.umbp.client.pool_client"):
        assert client.put_from_ptr("half", data.ctypes.data, data.nbytes)
    assert f"BatchAllocateSlots on peer {victim.node_id!r}" in caplog.text and "routing again" in caplog.text
    assert sorted(k for p in peers if p is not victim for k in p.ask("keys")) == ["half"]
    back = np.zeros_like(data)
    assert client.get_into_ptr("half", back.ctypes.data, back.nbytes)
    assert np.array_equal(back, data)
    # The reaper expires the dead peer (3 s of silence): it is no longer a put target.
    assert wait_for(
        lambda: all(
            r.node_id != victim.node_id for r in client._master.batch_route_put([f"z{i}" for i in range(8)], [1] * 8)
        ),
        timeout=10,
        every=0.3,
    )


def test_writer_dying_mid_put_frees_the_slot(cluster):
    _, _, client = cluster
    (route,) = client._master.batch_route_put(["orphan"], [PAGE])
    stub = client._peer(route.peer_address)
    req = peer_pb.AllocateSlotRequest(size=PAGE, tier=route.tier, key="orphan")
    start = time.monotonic()
    assert stub.AllocateSlot(req, timeout=2).outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
    # The writer never commits (as if it died): the key stays invisible, and a second writer is
    # never told it exists: a short wait ends in FAILED_PENDING, a longer one outlives the pending
    # TTL (1.5 s here), which frees the slot, and allocates it.
    assert stub.AllocateSlot(req, timeout=0.5).outcome == peer_pb.AllocateSlotResponse.FAILED_PENDING
    assert not client.exists("orphan")
    assert stub.AllocateSlot(req, timeout=4).outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
    assert time.monotonic() - start >= 1.4
    assert not client.exists("orphan")


def test_master_restart_rebuilds_the_index(cluster):
    master, _, client = cluster
    data = blocks(6, PAGE, 4)
    keys = [f"restart-{i}" for i in range(6)]
    assert all(client.batch_put_from_ptr(keys, [d.ctypes.data for d in data], [PAGE] * 6))
    master.kill()
    with pytest.raises(MasterUnavailableError, match="BatchLookup to master"):
        client.exists(keys[0])  # MasterUnavailableError within UMBP_RPC_TIMEOUT_MS, no hang
    restarted = MasterProcess(master.port)
    try:
        # The new master starts empty; peers are told EXPIRED, register again and full-sync.
        def healed() -> bool:
            try:
                return all(client.batch_exists(keys))
            except MasterUnavailableError:
                return False  # the channel is still backing off from the dead master

        assert wait_for(healed, timeout=20, every=0.2)
        out = [np.zeros(PAGE, np.uint8) for _ in keys]
        assert all(client.batch_get_into_ptr(keys, [o.ctypes.data for o in out], [PAGE] * 6))
        assert all(np.array_equal(d, o) for d, o in zip(data, out, strict=True))
    finally:
        restarted.kill()


@pytest.mark.parametrize("how", ["killed", "stopped"])
def test_get_from_a_dead_or_silent_owner_raises_in_time(cluster, how):
    _, peers, client = cluster
    (data,) = blocks(1, PAGE, 7)
    assert client.put_from_ptr("owned", data.ctypes.data, PAGE)
    (owner,) = [p for p in peers if "owned" in p.ask("keys")]
    if how == "killed":
        owner.kill()
    else:
        os.kill(owner.proc.pid, signal.SIGSTOP)  # alive but silent: only a deadline can tell
    start = time.monotonic()
    with pytest.raises(PeerUnavailableError, match=f"get 'owned': every replica's peer failed.*{owner.node_id}"):
        client.get_into_ptr("owned", np.zeros(PAGE, np.uint8).ctypes.data, PAGE)
    assert time.monotonic() - start < 6  # UMBP_RPC_TIMEOUT_MS=2000 per attempt, never a hang
