# SPDX-License-Identifier: MIT
"""Watermark LRU eviction end to end: a master pass asks the owning peer to drop the least
recently used unleased blocks, the peer's REMOVE events shrink the index, and the pages serve
new puts."""

from __future__ import annotations

import numpy as np
from conftest import PAGE, make_client, master_config, wait_for

from mori.umbp import MasterServer


def test_lru_eviction_frees_pages_down_to_the_low_watermark(monkeypatch):
    config = master_config(eviction_check_interval_s=3600, high_watermark=0.9, low_watermark=0.7)
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")  # the owner fills up before evicting on demand
    with (
        MasterServer(config) as master,
        make_client(master.address, "owner", 16 * PAGE) as owner,
        make_client(master.address, "writer") as w,
    ):
        rng = np.random.default_rng(5)
        data = {f"e{i:02d}": rng.integers(0, 256, PAGE, dtype=np.uint8) for i in range(15)}
        for key, value in data.items():  # one by one: e00 is the least recently added
            assert w.put_from_ptr(key, value.ctypes.data, PAGE)
        back = np.zeros(PAGE, np.uint8)
        assert w.get_into_ptr("e00", back.ctypes.data, PAGE)  # e00 is now the most recent (and leased)
        assert np.array_equal(back, data["e00"])
        # The writer remembered e00's owner and read it without the master (NOTE [owner cache]):
        # the owner reports the access with its next heartbeat.
        assert owner.flush()
        # 15/16 pages used > 0.9: evict down to 0.7 x 16 = 11.2 pages, i.e. 4 blocks, oldest first.
        assert master.evictor.run_once() == 4 * PAGE
        evicted = ["e01", "e02", "e03", "e04"]
        assert wait_for(lambda: not any(w.batch_exists(evicted)))
        survivors = [k for k in data if k not in evicted]
        assert all(w.batch_exists(survivors))
        assert sorted(owner.store.keys()) == survivors
        assert master.metrics.evicted._value.get() == 4
        # The freed pages take new blocks, whose bytes read back intact.
        extra = rng.integers(0, 256, PAGE, dtype=np.uint8)
        assert w.put_from_ptr("e16", extra.ctypes.data, PAGE)
        assert w.get_into_ptr("e16", back.ctypes.data, PAGE)
        assert np.array_equal(back, extra)
        # 12/16 = 0.75 is under the high watermark: nothing evicted, and the index not scanned.
        scans: list[tuple[str, int]] = []
        scan = master.master.store.candidates
        monkeypatch.setattr(
            master.master.store, "candidates", lambda node, tier: scans.append((node, tier)) or scan(node, tier)
        )
        assert master.evictor.run_once() == 0
        assert scans == []
