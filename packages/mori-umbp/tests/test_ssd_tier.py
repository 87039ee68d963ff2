# SPDX-License-Identifier: MIT
"""The SSD tier on its own: files in a tmp_path directory, byte-exact reads, LRU eviction by
capacity and watermarks, CRC checks, and typed capacity and config errors."""

from __future__ import annotations

import pytest
from conftest import random_blocks, ssd_read

from mori.umbp import ConfigError, PeerUnavailableError, TierCapacityError, ValueTooLargeError
from mori.umbp.peer.ssd import SUFFIX, SsdTier

KB = 1024


def _blocks(n: int, size: int, seed: int = 0) -> list[bytes]:
    return [block.tobytes() for block in random_blocks(n, seed, size)]


def test_blocks_round_trip_and_lru_eviction_makes_room(tmp_path):
    tier = SsdTier(tmp_path, 4 * KB, high_wm=1.0, low_wm=0.5)
    data = _blocks(5, KB)
    for i in range(4):
        assert tier.put(f"k{i}", data[i]) == []
    assert tier.used == 4 * KB and len(list(tmp_path.glob(f"*{SUFFIX}"))) == 4
    assert ssd_read(tier, "k0", KB) == data[0]  # k0 becomes the most recently used
    assert tier.put("k4", data[4]) == [("k1", KB)]  # full: the least recently used goes
    assert sorted(k for k, _ in tier.entries()) == ["k0", "k2", "k3", "k4"]
    assert ssd_read(tier, "k1", KB) is None
    assert all(ssd_read(tier, f"k{i}", KB) == data[i] for i in (0, 2, 3, 4))
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 4  # the victim's file is gone
    tier.close()  # without recovery the files go with the tier
    assert not list(tmp_path.iterdir())


def test_high_watermark_sweeps_down_to_the_low_one(tmp_path):
    tier = SsdTier(tmp_path, 10 * KB, high_wm=0.8, low_wm=0.5)
    data = _blocks(9, KB, seed=1)
    evicted = []
    for i, block in enumerate(data):
        evicted += tier.put(f"k{i}", block)
    # The 9th KiB crosses 0.8 x 10 KiB: LRU blocks go until at most 5 KiB are used.
    assert [k for k, _ in evicted] == ["k0", "k1", "k2", "k3"]
    assert tier.used == 5 * KB


def test_capacity_and_config_errors_are_typed(tmp_path):
    tier = SsdTier(tmp_path, 4 * KB, 0.9, 0.7)
    with pytest.raises(TierCapacityError, match=r"size=5120 exceeds the SSD tier's capacity_bytes=4096") as err:
        tier.put("big", bytes(5 * KB))
    assert isinstance(err.value, ValueTooLargeError)
    with pytest.raises(ConfigError, match=r"ssd.capacity_bytes=0 must be positive"):
        SsdTier(tmp_path, 0, 0.9, 0.7)
    with pytest.raises(ConfigError, match=r"low=0.9, high=0.5 must satisfy 0 < low < high <= 1"):
        SsdTier(tmp_path, KB, 0.5, 0.9)
    with pytest.raises(ConfigError, match=r"policy='mru' is not one of lru, prefix_aware_lru"):
        SsdTier(tmp_path, KB, 0.9, 0.7, policy="mru")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"storage_dir=.*cannot be created"):
        SsdTier(blocker / "sub", KB, 0.9, 0.7)


def test_a_corrupted_file_is_detected(tmp_path):
    tier = SsdTier(tmp_path, 4 * KB, 0.9, 0.7)
    tier.put("k", bytes(range(256)) * 4)
    (path,) = tmp_path.glob(f"*{SUFFIX}")
    raw = bytearray(path.read_bytes())
    raw[-7] ^= 0xFF  # a byte of the value, past the header and the key
    path.write_bytes(bytes(raw))
    with pytest.raises(PeerUnavailableError, match=r"SSD block 'k' .* is corrupt"):
        ssd_read(tier, "k", KB)


def test_without_recovery_a_restarted_tier_drops_the_previous_runs_files(tmp_path):
    SsdTier(tmp_path, 4 * KB, 0.9, 0.7, recover=True).put("k", bytes(KB))
    assert len(list(tmp_path.glob(f"*{SUFFIX}"))) == 1
    again = SsdTier(tmp_path, 4 * KB, 0.9, 0.7, recover=False)
    assert again.used == 0 and again.recovered == 0 and not list(tmp_path.glob(f"*{SUFFIX}"))
