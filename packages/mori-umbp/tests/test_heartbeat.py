# SPDX-License-Identifier: MIT
"""Peer-side healing of the index projection against a real master: a lost bundle (seq gap) and
a node the master reaped both end in a full sync that restores exactly the blocks the peer owns."""

from __future__ import annotations

import numpy as np
from conftest import PAGE, owner_and_writer, wait_for


def test_lost_bundle_gap_heals_by_full_sync():
    with owner_and_writer("gap-peer", 8 * PAGE, "gap-client") as (master, peer, client):
        data = np.arange(PAGE, dtype=np.uint8)
        assert client.put_from_ptr("seen", data.ctypes.data, PAGE)
        # A bundle the master never gets: the peer seals and drops it as if its heartbeat was lost.
        with peer._hb._lock:
            _, slot, _ = peer.store.allocate("lost", PAGE, 2)
            assert peer.store.commit(slot, "lost") == ""
            seq, _ = peer.store.events.bundles()[-1]
            peer.store.events.ack(seq)
        assert not client.exists("lost")
        assert client.put_from_ptr("after", data.ctypes.data, PAGE)  # next bundle: a gap, then a full sync
        assert master.metrics.seq_gap._value.get() == 1
        assert master.metrics.full_sync._value.get() >= 1
        assert wait_for(lambda: client.batch_exists(["seen", "lost", "after"]) == [True, True, True])
        back = np.zeros(PAGE, np.uint8)
        assert client.get_into_ptr("after", back.ctypes.data, PAGE)
        assert np.array_equal(back, data)


def test_reaped_node_registers_again_and_resyncs():
    with owner_and_writer("reaped", 8 * PAGE, "reaped-client") as (master, peer, client):
        data = np.full(PAGE, 7, np.uint8)
        assert client.put_from_ptr("survivor", data.ctypes.data, PAGE)
        master.master.unregister("reaped")  # what the reaper does to a silent node
        assert not client.exists("survivor")
        assert wait_for(lambda: client.exists("survivor"))  # the next heartbeat hears EXPIRED
        assert master.master.store.get_node("reaped").peer_address == peer.peer_address
