# SPDX-License-Identifier: MIT
"""Bad input raises typed errors naming the argument, the value and the limit, before any RPC;
an unreachable master raises within its deadline."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import free_port, make_client, master_config, owner_and_writer

from mori.umbp import (
    ConfigError,
    InvalidArgumentError,
    InvalidKeyError,
    MasterServer,
    MasterUnavailableError,
    UMBPMasterClient,
    UMBPTierType,
    UnknownTierError,
    ValueTooLargeError,
)
from mori.umbp.types import check_tier


@pytest.fixture(scope="module")
def pool():
    with owner_and_writer("errs-peer", 16 * 64 * 1024, "errs") as (_master, peer, c):
        yield c, peer


@pytest.mark.parametrize(
    ("key", "match"),
    [
        ("", "must not be empty"),
        (b"bytes", "must be a str"),
        (7, "must be a str"),
        ("a b", "whitespace"),
        ("line\n", "whitespace"),
        ("pipe|key", "'\\|'"),
        ("x" * 1025, "1025 bytes long; the limit is UMBP_MAX_KEY_BYTES=1024"),
    ],
)
def test_bad_keys(pool, key, match):
    client, _ = pool
    buf = np.zeros(16, np.uint8)
    with pytest.raises(InvalidKeyError, match=match):
        client.put_from_ptr(key, buf.ctypes.data, 16)
    with pytest.raises(InvalidKeyError, match=match):
        client.get_into_ptr(key, buf.ctypes.data, 16)
    with pytest.raises(InvalidKeyError):
        client.exists(key)


def test_batch_key_errors_name_the_index(pool):
    client, _ = pool
    buf = np.zeros(16, np.uint8)
    with pytest.raises(InvalidKeyError, match=r"keys\[1\]"):
        client.batch_put_from_ptr(["ok", ""], [buf.ctypes.data] * 2, [16, 16])
    with pytest.raises(InvalidArgumentError, match="list lengths differ"):
        client.batch_put_from_ptr(["a", "b"], [buf.ctypes.data], [16, 16])


def test_oversized_and_bad_sizes(pool, monkeypatch):
    client, _ = pool
    buf = np.zeros(16, np.uint8)
    monkeypatch.setenv("UMBP_MAX_BLOCK_BYTES", "1M")
    with pytest.raises(
        ValueTooLargeError, match=r"size=1048577 exceeds the largest block, UMBP_MAX_BLOCK_BYTES=1048576"
    ):
        client.put_from_ptr("big", buf.ctypes.data, (1 << 20) + 1)
    monkeypatch.setenv("UMBP_MAX_BLOCK_BYTES", "8M")  # above this client's 4 MiB staging buffer
    with pytest.raises(ValueTooLargeError, match=r"size=5242880 exceeds the staging buffer .*=4194304"):
        client.put_from_ptr("big", buf.ctypes.data, 5 << 20)
    with pytest.raises(InvalidArgumentError, match="must be positive"):
        client.put_from_ptr("zero", buf.ctypes.data, 0)
    with pytest.raises(InvalidArgumentError, match="src=0 must be a non-null address"):
        client.put_from_ptr("null", 0, 16)


def test_get_with_the_wrong_size(pool):
    client, _ = pool
    data = np.arange(64, dtype=np.uint8)
    assert client.put_from_ptr("sized", data.ctypes.data, 64)
    with pytest.raises(InvalidArgumentError, match="size=32 but block 'sized' holds 64 bytes"):
        client.get_into_ptr("sized", data.ctypes.data, 32)


def test_unknown_tiers():
    assert check_tier("tier", 2) is UMBPTierType.DRAM
    with pytest.raises(UnknownTierError, match=r"tier=7 is not a UMBPTierType \(allowed: Unknown, HBM, DRAM, SSD\)"):
        check_tier("tier", 7)
    with pytest.raises(UnknownTierError, match="tier='DRAM' is not a UMBPTierType"):
        check_tier("tier", "DRAM")
    with pytest.raises(UnknownTierError, match="tier=SSD is not accepted here"):
        check_tier("tier", UMBPTierType.SSD, (UMBPTierType.HBM, UMBPTierType.DRAM))
    with pytest.raises(UnknownTierError, match="tier_capacities key=9"):
        UMBPMasterClient("127.0.0.1:1", "n").register_self({9: (1, 1)})  # type: ignore[dict-item]


def test_peer_refuses_an_unallocatable_tier(pool):
    from mori.umbp.rpc import peer_pb

    client, peer = pool
    stub = client._peer(peer.peer_address)
    res = stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=16, tier=3, key="ssd"), timeout=2)
    assert res.outcome == peer_pb.AllocateSlotResponse.FAILED
    assert "tier=SSD is not a page tier (allowed: HBM, DRAM)" in res.message
    res = stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=16, tier=9, key="nine"), timeout=2)
    assert res.outcome == peer_pb.AllocateSlotResponse.FAILED and "tier=9 is not a page tier" in res.message
    # HBM on a peer without it: no space here (the client routes again), naming what the peer has.
    res = stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=16, tier=1, key="hbm"), timeout=2)
    assert res.outcome == peer_pb.AllocateSlotResponse.FAILED_NO_SPACE
    assert res.message == "tier=HBM: this peer has no such tier (has DRAM)"


def test_unreachable_master_raises_within_the_deadline(monkeypatch):
    monkeypatch.setenv("UMBP_RPC_TIMEOUT_MS", "500")
    mc = UMBPMasterClient(f"127.0.0.1:{free_port()}", "lonely")  # lazy channel: construction succeeds
    start = time.monotonic()
    with pytest.raises(MasterUnavailableError, match=r"BatchLookup to master 127\.0\.0\.1"):
        mc.batch_lookup(["k"])
    assert time.monotonic() - start < 3
    with pytest.raises(MasterUnavailableError):
        make_client(mc.master_address, "lonely")  # a client cannot join a pool without its master


def test_bad_configs(monkeypatch):
    with pytest.raises(ConfigError, match="0 < low < high <= 1"):
        MasterServer(master_config(high_watermark=0.5, low_watermark=0.6))
    monkeypatch.setenv("UMBP_DRAM_PAGE_SIZE", "lots")
    from mori.umbp import settings

    with pytest.raises(ConfigError, match="UMBP_DRAM_PAGE_SIZE='lots' does not parse as size"):
        settings.get_int("UMBP_DRAM_PAGE_SIZE")
