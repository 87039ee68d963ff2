# SPDX-License-Identifier: MIT
"""The SSD tier survives a restart: committed block files are re-discovered from their headers
(key, size, depth, CRC), torn or corrupt ones are discarded; and a peer process killed and
started again re-announces its SSD blocks to the master, which routes reads to them, byte-exact."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import PAGE, MasterProcess, PeerProcess, free_port, make_client, random_blocks, ssd_read, wait_for

from mori.umbp.peer import ssd_format
from mori.umbp.peer.ssd import SUFFIX, SsdTier, key_path

KB = 1024


def _data(n: int, size: int, seed: int = 0) -> list[bytes]:
    return [block.tobytes() for block in random_blocks(n, seed, size)]


def test_recovery_keeps_whole_records_and_discards_damaged_ones(tmp_path):
    data = _data(6, KB)
    tier = SsdTier(tmp_path, 64 * KB, 0.9, 0.7, recover=True)
    for i, block in enumerate(data):
        tier.put(f"k{i}", block, depth=i)
    tier.close()  # a graceful stop keeps the files
    # A crash's leftovers: a file cut short, a flipped value byte, a write never renamed, a record
    # under another key's name, and a file that is no record at all.
    p1, p2 = key_path(tmp_path, "k1"), key_path(tmp_path, "k2")
    p1.write_bytes(p1.read_bytes()[:-100])
    raw = bytearray(p2.read_bytes())
    raw[-1] ^= 0x01
    p2.write_bytes(bytes(raw))
    (tmp_path / (p1.name + ".tmp")).write_bytes(b"half a write")
    key_path(tmp_path, "k3").replace(key_path(tmp_path, "k9"))
    (tmp_path / f"{'0' * 64}{SUFFIX}").write_bytes(b"UMBP")
    again = SsdTier(tmp_path, 64 * KB, 0.9, 0.7, recover=True)
    survivors = ["k0", "k4", "k5"]
    assert again.recovered == 3 and sorted(k for k, _ in again.entries()) == survivors
    assert [again.depth_of(k) for k in survivors] == [0, 4, 5]
    assert all(ssd_read(again, k, KB) == data[int(k[1])] for k in survivors)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(key_path(tmp_path, k).name for k in survivors)
    assert again.used == 3 * KB


def test_recovered_order_is_by_age_and_a_smaller_tier_evicts_the_oldest(tmp_path):
    data = _data(4, KB, seed=1)
    tier = SsdTier(tmp_path, 64 * KB, 0.9, 0.7, recover=True)
    for i, block in enumerate(data):
        tier.put(f"o{i}", block)
    tier.close()
    for age, key in enumerate(["o2", "o0", "o3", "o1"]):  # o2 oldest ... o1 newest
        os.utime(key_path(tmp_path, key), ns=(10**18 + age, 10**18 + age))
    small = SsdTier(tmp_path, 2 * KB, 1.0, 0.5, recover=True)  # room for two of the four
    assert sorted(k for k, _ in small.entries()) == ["o1", "o3"]
    assert small.put("o4", data[0]) == [("o3", KB)]  # o3 is now the least recently used


def test_records_are_checked_field_by_field(tmp_path):
    path = tmp_path / "r.blk"
    rec = ssd_format.write_record(path, "kéy/with/slashes", b"value", 7)
    back = ssd_format.read_record(path)
    assert (back.key, back.size, back.depth, back.crc, back.offset) == (rec.key, 5, 7, rec.crc, rec.offset)
    raw = bytearray(path.read_bytes())
    raw[6] = 0  # the committed flag
    path.write_bytes(bytes(raw))
    with pytest.raises(ssd_format.BadRecord, match="never committed"):
        ssd_format.read_record(path)
    path.write_bytes(b"XXXX" + bytes(raw[4:]))
    with pytest.raises(ssd_format.BadRecord, match="is not a UMBP v1 record"):
        ssd_format.read_record(path)


@pytest.mark.timeout(90)
def test_a_killed_peer_restarts_and_reannounces_its_ssd_blocks(tmp_path):
    master = MasterProcess(free_port())
    ssd_dir = str(tmp_path)
    peer = PeerProcess(master.address, "ssd-peer", 16 * PAGE, ssd_dir=ssd_dir)
    writer = make_client(master.address, "writer")
    try:
        rng = np.random.default_rng(12)
        data = {f"p{i}": rng.integers(0, 256, PAGE, dtype=np.uint8) for i in range(6)}
        for key, value in data.items():
            assert writer.put_from_ptr(key, value.ctypes.data, PAGE)
        assert peer.ask("drain") is True
        assert peer.ask("tiers")[1] == sorted(data)
        peer.kill()  # a crash: DRAM copies are lost, the SSD files stay
        torn = key_path(tmp_path / "ssd-peer", "p3")
        torn.write_bytes(torn.read_bytes()[: PAGE // 2])
        peer = PeerProcess(master.address, "ssd-peer", 16 * PAGE, ssd_dir=ssd_dir)
        # Re-registering wiped the dead run's index entries; the full sync put the SSD ones back
        # before the constructor returned.
        survivors = sorted(k for k in data if k != "p3")
        assert peer.ask("tiers") == ({}, survivors)
        assert writer.batch_exists(sorted(data)) == [k != "p3" for k in sorted(data)]
        for key in survivors:
            out = np.zeros(PAGE, np.uint8)
            assert writer.get_into_ptr(key, out.ctypes.data, PAGE)  # staged from the file, read over mori-io
            assert np.array_equal(out, data[key])
        assert not writer.get_into_ptr("p3", np.zeros(PAGE, np.uint8).ctypes.data, PAGE)
        # The restarted peer takes new blocks and spills them next to the recovered ones.
        fresh = rng.integers(0, 256, PAGE, dtype=np.uint8)
        assert writer.put_from_ptr("p3", fresh.ctypes.data, PAGE)
        assert peer.ask("drain") is True
        assert wait_for(lambda: peer.ask("tiers")[1] == sorted(data))
    finally:
        writer.close()
        peer.kill()
        master.kill()
