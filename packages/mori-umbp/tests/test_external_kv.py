# SPDX-License-Identifier: MIT
"""External-KV index and hit counting, as MORI's API reference describes them: reports are
additive per (node, tier), matches list hashes by tier fastest first, ``count_as_hit`` bumps each
unique matched hash once per call, counters survive revocation, lookups are sparse, batches are
bounded, and counters expire after the hit-index TTL."""

from __future__ import annotations

import pytest
from conftest import make_client, master_config

from mori.umbp import (
    InvalidArgumentError,
    MasterServer,
    MasterUnavailableError,
    UMBPExternalKvHitCountEntry,
    UMBPMasterClient,
    UMBPTierType,
    UnknownTierError,
)
from mori.umbp.master.external_kv import ExternalKvIndex

DRAM, SSD, HBM = UMBPTierType.DRAM, UMBPTierType.SSD, UMBPTierType.HBM


def test_index_semantics_and_counter_expiry():
    idx = ExternalKvIndex()
    idx.report("n1", ["h1", "h2"], int(SSD))
    idx.report("n1", ["h1"], int(HBM))  # additive: h1 is in two tiers now
    idx.report("dead", ["h1"], int(DRAM))
    (m,) = idx.match(["h1", "h2", "h1", "zz"], alive={"n1"}, count_as_hit=True, now=100.0)
    assert m.node_id == "n1" and m.hashes_by_tier == {int(HBM): ["h1"], int(SSD): ["h1", "h2"]}
    assert list(m.hashes_by_tier) == [int(HBM), int(SSD)]  # fastest tier first
    assert idx.hit_counts(["zz", "h2", "h1"]) == [("h2", 1), ("h1", 1)]  # once per unique hash; sparse
    idx.revoke("n1", ["h1"], int(HBM))
    idx.revoke_tier("n1", int(SSD))
    assert idx.match(["h1", "h2"], {"n1"}, True, 150.0) == []
    assert idx.hit_counts(["h1", "h2"]) == [("h1", 1), ("h2", 1)]  # revocation keeps the counters
    assert idx.gc(now=100.0 + 7200.5, ttl_s=7200) == 2
    assert idx.hit_counts(["h1", "h2"]) == []


def test_external_kv_over_grpc():
    with (
        MasterServer(master_config(hit_query_max_batch=4)) as master,
        make_client(master.address, "sglang-0") as node,
        make_client(master.address, "sglang-1") as other,
    ):
        mc = UMBPMasterClient(master.address)
        assert node.report_external_kv_blocks(["a", "b", "c"], DRAM)
        assert node.report_external_kv_blocks(["c"], SSD)
        assert other.report_external_kv_blocks(["b"], HBM)
        mc.report_external_kv_blocks("ghost", ["a"], DRAM)  # not a registered node: ignored

        matches = {m.node_id: m for m in node.match_external_kv(["a", "b", "c", "d"])}
        assert set(matches) == {"sglang-0", "sglang-1"}
        assert matches["sglang-0"].hashes_by_tier == {DRAM: ["a", "b", "c"], SSD: ["c"]}
        assert matches["sglang-0"].matched_hash_count() == 3
        assert matches["sglang-0"].peer_address == node.peer_address
        assert matches["sglang-1"].hashes_by_tier == {HBM: ["b"]}
        assert node.get_external_kv_hit_counts(["a", "b"]) == []  # no count_as_hit yet

        mc.match_external_kv(["a", "b", "b", "d"], count_as_hit=True)
        mc.match_external_kv(["b"], count_as_hit=True)
        assert mc.get_external_kv_hit_counts(["a", "b", "d"]) == [
            UMBPExternalKvHitCountEntry("a", 1),
            UMBPExternalKvHitCountEntry("b", 2),
        ]
        assert node.revoke_external_kv_blocks(["a"], DRAM)
        assert node.revoke_all_external_kv_blocks_at_tier(SSD)
        assert node.match_external_kv(["a"]) == []
        (m,) = node.match_external_kv(["c"])
        assert m.hashes_by_tier == {DRAM: ["c"]}
        assert mc.get_external_kv_hit_counts(["a"]) == [UMBPExternalKvHitCountEntry("a", 1)]  # survives

        other.close()  # a node that leaves takes its external blocks along
        assert [m.node_id for m in node.match_external_kv(["b"])] == ["sglang-0"]

        with pytest.raises(InvalidArgumentError, match=r"5 hashes exceed UMBP_HIT_QUERY_MAX_BATCH=4"):
            mc.get_external_kv_hit_counts(["1", "2", "3", "4", "5"])
        with pytest.raises(InvalidArgumentError, match=r"5 hashes exceed UMBP_HIT_QUERY_MAX_BATCH=4"):
            node.match_external_kv(["1", "2", "3", "4", "5"])
        with pytest.raises(UnknownTierError, match=r"tier=Unknown is not accepted here"):
            node.report_external_kv_blocks(["a"], UMBPTierType.Unknown)
        with pytest.raises(InvalidArgumentError, match=r"hashes\[1\]='b c' holds ' '"):
            node.report_external_kv_blocks(["a", "b c"], DRAM)
        mc.close()


def test_match_swallows_an_unreachable_master_but_the_master_client_raises():
    with MasterServer(master_config()) as master:
        address = master.address
        node = make_client(address, "lonely")
    # The master is gone: UMBPClient answers "no match" as MORI does; the raw client raises.
    assert node.match_external_kv(["a"]) == []
    mc = UMBPMasterClient(address)
    with pytest.raises(MasterUnavailableError, match=r"MatchExternalKv to master"):
        mc.match_external_kv(["a"])
    mc.close()
    node.close()
