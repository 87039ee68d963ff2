# SPDX-License-Identifier: MIT
"""Spill by copy after commit, end to end: a master, an owner node with DRAM and an SSD tier in
tmp_path, and a writer that owns no pages (so every byte crosses mori-io). The master's index
follows the block from DRAM+SSD to SSD only to gone, and every read returns the bytes put."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import PAGE, make_client, master_config, wait_for

from mori.umbp import ConfigError, MasterServer, UMBPSsdConfig, UMBPTierType

DRAM, SSD = int(UMBPTierType.DRAM), int(UMBPTierType.SSD)


def _tiers(master, key: str) -> set[int]:
    (locations,) = master.master.store.lookup([key])
    return {loc.tier for loc in locations}


def _get(client, key: str) -> np.ndarray | None:
    out = np.zeros(PAGE, np.uint8)
    return out if client.get_into_ptr(key, out.ctypes.data, PAGE) else None


def test_spill_dram_eviction_then_ssd_eviction(tmp_path):
    ssd = UMBPSsdConfig(True, str(tmp_path), 4 * PAGE, high_watermark=1.0, low_watermark=0.5)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 16 * PAGE, ssd=ssd) as owner,
        make_client(master.address, "writer") as w,
    ):
        rng = np.random.default_rng(11)
        data = {f"s{i}": rng.integers(0, 256, PAGE, dtype=np.uint8) for i in range(5)}
        assert w.put_from_ptr("s0", data["s0"].ctypes.data, PAGE)
        assert owner.store.drain_spills(10)
        assert wait_for(lambda: _tiers(master, "s0") == {DRAM, SSD})  # the copy; DRAM stays
        assert list((tmp_path / "owner").iterdir())
        (hit,) = master.master.route_get(["s0"], set())
        assert hit is not None and hit[0].tier == DRAM  # gets prefer the faster tier
        assert np.array_equal(_get(w, "s0"), data["s0"])

        # DRAM evicts it (once the read lease of that get ran out): it is read from SSD now.
        assert wait_for(lambda: owner.store.evict(["s0"]) == [("s0", PAGE)], timeout=5)
        assert owner.flush()
        assert _tiers(master, "s0") == {SSD} and owner.store.keys() == []
        (hit,) = master.master.route_get(["s0"], set())
        assert hit is not None and hit[0].tier == SSD
        assert np.array_equal(_get(w, "s0"), data["s0"])  # staged, then a mori-io read
        assert owner.store.staging is not None and owner.store.staging.leased() == 0  # released
        assert np.array_equal(_get(owner, "s0"), data["s0"])  # the owner reads its file directly

        # Four more blocks fill the 4-page SSD tier: its LRU block, s0, is evicted from SSD too,
        # so it leaves the index and becomes a miss.
        for key in ("s1", "s2", "s3", "s4"):
            assert w.put_from_ptr(key, data[key].ctypes.data, PAGE)
        assert owner.store.drain_spills(10)
        assert wait_for(lambda: not w.exists("s0"))
        assert _tiers(master, "s0") == set() and _get(w, "s0") is None
        assert sorted(owner.store.ssd_keys()) == ["s1", "s2", "s3", "s4"]
        assert all(_tiers(master, k) == {DRAM, SSD} for k in ("s1", "s2", "s3", "s4"))
        assert owner.store.capacities()[SSD] == (4 * PAGE, 0)
        assert master.master.store.get_node("owner").capacities[SSD][0] == 4 * PAGE
        assert np.array_equal(_get(w, "s4"), data["s4"])


def test_full_sync_reports_both_tiers(tmp_path):
    ssd = UMBPSsdConfig(True, str(tmp_path), 8 * PAGE)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 8 * PAGE, ssd=ssd) as owner,
    ):
        value = np.arange(PAGE, dtype=np.uint8)
        assert owner.put_from_ptr("f0", value.ctypes.data, PAGE)
        assert owner.store.drain_spills(10)
        assert wait_for(lambda: owner.store.evict(["f0"]) == [("f0", PAGE)], timeout=5)
        _, snapshot = owner.store.full_sync()
        assert snapshot == [(0, "f0", SSD, PAGE)]


def test_ssd_config_errors_are_typed(tmp_path):
    with MasterServer(master_config()) as master:
        with pytest.raises(ConfigError, match=r"ssd.capacity_bytes=-1 must be positive"):
            make_client(master.address, "bad", PAGE, ssd=UMBPSsdConfig(True, str(tmp_path), -1))
        with pytest.raises(ConfigError, match=r"low=0.95, high=0.9"):
            make_client(master.address, "bad", PAGE, ssd=UMBPSsdConfig(True, str(tmp_path), PAGE, 0.9, 0.95))
        with pytest.raises(ConfigError, match=r"policy='fifo'"):
            make_client(master.address, "bad", PAGE, ssd=UMBPSsdConfig(True, str(tmp_path), PAGE), policy="fifo")


def test_ssd_environment_is_read_and_checked(monkeypatch, tmp_path):
    from mori.umbp import UMBPConfig

    monkeypatch.setenv("UMBP_SSD_ENABLED", "1")
    monkeypatch.setenv("UMBP_SSD_DIR", str(tmp_path))
    monkeypatch.setenv("UMBP_SSD_CAPACITY", "1G")
    monkeypatch.setenv("UMBP_EVICTION_POLICY", "prefix_aware_lru")
    config = UMBPConfig.from_environment("n", distributed=True)
    assert (config.ssd.enabled, config.ssd.storage_dir, config.ssd.capacity_bytes) == (True, str(tmp_path), 1 << 30)
    assert config.eviction.policy == "prefix_aware_lru"
    monkeypatch.setenv("UMBP_SSD_CAPACITY", "lots")
    with pytest.raises(ConfigError, match=r"UMBP_SSD_CAPACITY='lots' does not parse as size"):
        UMBPConfig.from_environment("n", distributed=True)
    monkeypatch.setenv("UMBP_SSD_CAPACITY", "1G")
    monkeypatch.setenv("UMBP_EVICTION_POLICY", "fifo")
    with pytest.raises(ConfigError, match=r"UMBP_EVICTION_POLICY='fifo' does not parse as choice"):
        UMBPConfig.from_environment("n", distributed=True)


def test_busy_staging_is_an_error_not_a_miss_and_leases_expire(tmp_path):
    from mori.umbp import PeerUnavailableError

    ssd = UMBPSsdConfig(True, str(tmp_path), 8 * PAGE)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 8 * PAGE, ssd=ssd) as owner,
        make_client(master.address, "writer") as w,
    ):
        value = np.arange(PAGE, dtype=np.uint8) ^ 0x5A
        assert w.put_from_ptr("b0", value.ctypes.data, PAGE)
        assert owner.store.drain_spills(10)
        assert wait_for(lambda: owner.store.evict(["b0"]) == [("b0", PAGE)], timeout=5)
        assert owner.flush()
        staging = owner.store.staging
        assert staging is not None
        held = [staging.acquire() for _ in range(4)]  # every slot leased by (pretend) readers
        assert all(h is not None for h in held)
        with pytest.raises(PeerUnavailableError, match=r"RESOURCE_EXHAUSTED.*all 4 SSD staging slots are leased"):
            _get(w, "b0")
        assert staging.release(held[0][0]) and not staging.release(held[0][0])
        assert np.array_equal(_get(w, "b0"), value)
        assert all(staging.release(h[0]) for h in held[1:])
        staging.lease_s = 0.0  # readers that never release: their leases lapse, the slots return
        assert all(staging.acquire() is not None for _ in range(10))
