# SPDX-License-Identifier: MIT
"""Pool membership against a real master and a real peer on loopback: a caller without the pool
secret, or with a wrong one, is refused UNAUTHENTICATED before any work, changes nothing and
receives no secret; a replay (stale or reused) is refused; a member may act only as itself, and
holds at most UMBP_MAX_PENDING_SLOTS_PER_NODE pending slots on a peer."""

from __future__ import annotations

import os
import stat
import time

import grpc
import numpy as np
import pytest
from conftest import PAGE, make_client, master_config, owner_and_writer

from mori.io import EngineDesc
from mori.umbp import AuthenticationError, MasterServer, PendingLimitError, UMBPMasterClient, auth, rpc
from mori.umbp.rpc import pb, peer_pb

DRAM = 2


@pytest.fixture
def pool():
    with owner_and_writer("tenant", 8 * PAGE, "tenant-reader") as (master, tenant, reader):
        data = np.arange(PAGE, dtype=np.uint8)
        assert reader.put_from_ptr("tenant-block", data.ctypes.data, PAGE)
        yield master, tenant, reader


def _raw(address: str):
    """A caller with no credential at all: a plain channel, as any process on the host could open."""
    ch = grpc.insecure_channel(address)
    return ch, rpc.pb_grpc.UMBPMasterStub(ch), rpc.peer_grpc.UMBPPeerStub(ch)


def _signed(address: str, node_id: str, secret: bytes):
    ch = rpc.channel(address, auth.ClientAuth(node_id, lambda: secret))
    return ch, rpc.pb_grpc.UMBPMasterStub(ch), rpc.peer_grpc.UMBPPeerStub(ch)


def _state(master, tenant):
    """What a hostile caller must not change: nodes, index, the peer's blocks and free pages."""
    return (
        sorted(master.master.alive_nodes()),
        master.master.lookup(["tenant-block", "intruder-block"]),
        sorted(tenant.store.keys()),
        tenant.store.capacities(),
    )


def _master_calls(engine_desc: bytes):
    return [
        ("RegisterClient", pb.RegisterClientRequest(node_id="intruder", peer_address="x:1", engine_desc=engine_desc)),
        ("UnregisterClient", pb.UnregisterClientRequest(node_id="tenant")),
        ("Heartbeat", pb.HeartbeatRequest(node_id="tenant", is_full_sync=True)),
        # NOTE [direct put]: the pool view (engine descriptors) and an ADD-if-absent.
        (
            "Heartbeat",
            pb.HeartbeatRequest(
                node_id="tenant",
                want_pool_view=True,
                bundles=[pb.KvEventBundle(seq=1, events=[pb.KvEvent(key="intruder-block", tier=DRAM, if_absent=True)])],
            ),
        ),
        ("RouteGet", pb.RouteGetRequest(key="tenant-block")),
        ("BatchRouteGet", pb.BatchRouteGetRequest(keys=["tenant-block"])),
        ("RoutePut", pb.RoutePutRequest(key="intruder-block", block_size=PAGE)),
        ("BatchRoutePut", pb.BatchRoutePutRequest(keys=["intruder-block"], block_sizes=[PAGE])),
        ("BatchLookup", pb.BatchLookupRequest(keys=["tenant-block"])),
        ("MatchExternalKv", pb.MatchExternalKvRequest(hashes=["h"])),
    ]


def _peer_calls():
    return [
        ("GetPeerInfo", peer_pb.GetPeerInfoRequest()),
        ("AllocateSlot", peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key="intruder-block")),
        ("ResolveKey", peer_pb.ResolveKeyRequest(key="tenant-block")),
        ("EvictKey", peer_pb.EvictKeyRequest(keys=["tenant-block"])),
        ("CommitSlot", peer_pb.CommitSlotRequest(slot_id=1, key="intruder-block")),
        (
            "BatchPutInline",
            peer_pb.BatchPutInlineRequest(entries=[peer_pb.PutInlineEntry(key="intruder-block", tier=DRAM, data=b"x")]),
        ),
        (  # a direct put (NOTE [direct put]): placed by the caller, committed if absent
            "BatchPutInline",
            peer_pb.BatchPutInlineRequest(
                entries=[peer_pb.PutInlineEntry(key="intruder-block", tier=DRAM, data=b"x", if_absent=True)]
            ),
        ),
        (
            "BatchCommitSlots",
            peer_pb.BatchCommitSlotsRequest(
                entries=[peer_pb.BatchCommitSlotEntry(slot_id=1, key="intruder-block", if_absent=True)]
            ),
        ),
    ]


def _refused_everything(master_stub, peer_stub, tenant_secret: bytes) -> None:
    for name, req in _master_calls(b"forged"):
        with pytest.raises(grpc.RpcError) as err:
            getattr(master_stub, name)(req, timeout=2)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
        assert tenant_secret.hex() not in err.value.details()
    for name, req in _peer_calls():
        with pytest.raises(grpc.RpcError) as err:
            getattr(peer_stub, name)(req, timeout=2)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, name


def test_caller_without_the_secret_is_refused_and_changes_nothing(pool):
    master, tenant, _ = pool
    before = _state(master, tenant)
    tenant_secret = EngineDesc.unpack(tenant._desc).secret
    ch_m, master_stub, _ = _raw(master.address)
    ch_p, _, peer_stub = _raw(tenant.peer_address)
    with ch_m, ch_p:
        _refused_everything(master_stub, peer_stub, tenant_secret)
    assert _state(master, tenant) == before
    assert master.master.store.get_node("intruder") is None


def test_caller_with_a_wrong_secret_is_refused_and_changes_nothing(pool):
    master, tenant, _ = pool
    before = _state(master, tenant)
    wrong = b"\x01" * 32
    ch_m, master_stub, _ = _signed(master.address, "tenant", wrong)
    ch_p, _, peer_stub = _signed(tenant.peer_address, "tenant", wrong)
    with ch_m, ch_p:
        _refused_everything(master_stub, peer_stub, EngineDesc.unpack(tenant._desc).secret)
    # The public client names the cause with the package's typed error.
    mc = UMBPMasterClient(master.address, "intruder", pool_secret=wrong)
    with pytest.raises(AuthenticationError, match=r"RegisterClient to master .* refused: .*pool secret"):
        mc.register_self({DRAM: (PAGE, PAGE)}, "127.0.0.1:1", b"forged")
    with pytest.raises(AuthenticationError, match="UMBP_POOL_SECRET"):
        mc.route_get("tenant-block")
    mc.close()
    assert _state(master, tenant) == before


def test_the_generated_secret_is_private_to_its_user(pool):
    master, _, _ = pool
    path = auth.secret_file(master.address)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert os.stat(path).st_uid == os.getuid()
    secret = auth.member_secret(None, master.address)
    assert secret is not None and len(secret) == auth.SECRET_BYTES
    # A member proves it; a route reply then carries the owner's engine descriptor.
    ch, master_stub, _ = _signed(master.address, "tenant-reader", secret)
    with ch:
        hit = master_stub.RouteGet(pb.RouteGetRequest(key="tenant-block"), timeout=2)
    assert hit.found and EngineDesc.unpack(hit.engine_desc).secret


def test_replays_are_refused(pool):
    master, _, _ = pool
    secret = auth.member_secret(None, master.address)
    assert secret is not None
    method = "/umbp.UMBPMaster/BatchLookup"
    req = pb.BatchLookupRequest(keys=["tenant-block"])
    ch, master_stub, _ = _raw(master.address)
    window = auth.Verifier(secret).window_ms
    with ch:
        # A credential recorded long ago (outside UMBP_AUTH_WINDOW_MS) is refused...
        long_ago = int(time.time() * 1000) - window - 1000
        stale = auth.sign(auth.keyed(secret), method, "tenant-reader", req.SerializeToString(), long_ago)
        with pytest.raises(grpc.RpcError) as err:
            master_stub.BatchLookup(req, timeout=2, metadata=[(auth.METADATA_KEY, stale)])
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "off this clock" in err.value.details()
        # ...and a fresh one is accepted once: the same bytes sent again are a replay.
        fresh = auth.sign(auth.keyed(secret), method, "tenant-reader", req.SerializeToString())
        assert list(master_stub.BatchLookup(req, timeout=2, metadata=[(auth.METADATA_KEY, fresh)]).found) == [True]
        with pytest.raises(grpc.RpcError) as err:
            master_stub.BatchLookup(req, timeout=2, metadata=[(auth.METADATA_KEY, fresh)])
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "replayed" in err.value.details()
        # A credential for one request does not cover another (the MAC binds the body and method).
        other = pb.BatchLookupRequest(keys=["intruder-block"])
        reused = auth.sign(auth.keyed(secret), method, "tenant-reader", req.SerializeToString())
        with pytest.raises(grpc.RpcError) as err:
            master_stub.BatchLookup(other, timeout=2, metadata=[(auth.METADATA_KEY, reused)])
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        moved = auth.sign(auth.keyed(secret), "/umbp.UMBPMaster/RouteGet", "tenant-reader", req.SerializeToString())
        with pytest.raises(grpc.RpcError) as err:
            master_stub.BatchLookup(req, timeout=2, metadata=[(auth.METADATA_KEY, moved)])
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_member_acts_only_as_itself(pool):
    master, _, _ = pool
    secret = auth.member_secret(None, master.address)
    assert secret is not None
    ch, master_stub, _ = _signed(master.address, "mallory", secret)
    with ch:
        for name, req in (
            ("UnregisterClient", pb.UnregisterClientRequest(node_id="tenant")),
            ("Heartbeat", pb.HeartbeatRequest(node_id="tenant", is_full_sync=True)),
            (  # an ADD-if-absent in another node's name (NOTE [direct put])
                "Heartbeat",
                pb.HeartbeatRequest(
                    node_id="tenant",
                    bundles=[pb.KvEventBundle(seq=9, events=[pb.KvEvent(key="forged", tier=DRAM, if_absent=True)])],
                ),
            ),
            ("RegisterClient", pb.RegisterClientRequest(node_id="tenant", peer_address="x:1")),
        ):
            with pytest.raises(grpc.RpcError) as err:
                getattr(master_stub, name)(req, timeout=2)
            assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED, name
    assert "tenant" in master.master.alive_nodes()
    assert master.master.lookup(["tenant-block", "forged"]) == [True, False]


def test_pending_slots_are_capped_per_node(monkeypatch):
    monkeypatch.setenv("UMBP_MAX_PENDING_SLOTS_PER_NODE", "3")
    with MasterServer(master_config()) as master, make_client(master.address, "capped-peer", 16 * PAGE) as peer:
        secret = auth.member_secret(None, master.address)
        assert secret is not None
        ch, _, hog = _signed(peer.peer_address, "hog", secret)
        ch2, _, other = _signed(peer.peer_address, "other", secret)
        with ch, ch2:
            slots = []
            for i in range(3):
                res = hog.AllocateSlot(peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key=f"hog-{i}"), timeout=2)
                assert res.outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
                slots.append(res.slot_id)
            fourth = peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key="hog-3")
            with pytest.raises(PendingLimitError, match="UMBP_MAX_PENDING_SLOTS_PER_NODE=3"):
                rpc.call("AllocateSlot", hog.AllocateSlot, fourth, AuthenticationError)
            # The cap is per node: another member still gets pages.
            res = other.AllocateSlot(peer_pb.AllocateSlotRequest(size=PAGE, tier=DRAM, key="o-0"), timeout=2)
            assert res.outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
            hog.AbortSlot(peer_pb.AbortSlotRequest(slot_id=slots[0]), timeout=2)
            assert hog.AllocateSlot(fourth, timeout=2).outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
        assert peer.store.capacities()[DRAM][1] == 12 * PAGE  # 4 pending slots of one page each


def test_a_configured_secret_is_used_and_no_file_is_written(monkeypatch, tmp_path):
    secret = os.urandom(32)
    monkeypatch.setenv("UMBP_POOL_SECRET_DIR", str(tmp_path / "secrets"))
    monkeypatch.setenv("UMBP_POOL_SECRET", secret.hex())
    with MasterServer(master_config()) as master, make_client(master.address, "env-peer", 4 * PAGE) as peer:
        data = np.arange(PAGE, dtype=np.uint8)
        assert peer.put_from_ptr("env-block", data.ctypes.data, PAGE)
        assert not auth.secret_file(master.address).exists()
        ch, master_stub, _ = _signed(master.address, "env-peer", secret)
        with ch:
            assert list(master_stub.BatchLookup(pb.BatchLookupRequest(keys=["env-block"]), timeout=2).found) == [True]


def test_a_secret_directory_others_can_read_is_refused(monkeypatch, tmp_path):
    from mori.umbp import ConfigError

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    monkeypatch.setenv("UMBP_POOL_SECRET_DIR", str(shared))
    with pytest.raises(ConfigError, match=r"UMBP_POOL_SECRET_DIR=.* must be a directory of uid .* mode 0700"):
        MasterServer(master_config())
    assert list(shared.iterdir()) == []
