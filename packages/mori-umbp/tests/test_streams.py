# SPDX-License-Identifier: MIT
"""NOTE [heartbeat stream]: heartbeats and the data path's peer calls over long-lived streams,
against a real master and real peers on loopback. The stream's opening and every frame are
checked by the pool credential before anything is acted on; a master or peer out of stream room,
or without the stream, is called unary; a master that stops answering gives an error after the
call's timeout, never a hang. These are the calls a client makes where a server serves no wire
(NOTE [wire] in mori.umbp.wire: an older version, full, or UMBP_WIRE=0), so this module turns the
wire off; test_wire.py is its counterpart."""

from __future__ import annotations

import time

import grpc
import numpy as np
import pytest
from conftest import PAGE, MasterProcess, free_port, master_config, owner_and_writer

from mori.umbp import (
    AuthenticationError,
    MasterServer,
    MasterUnavailableError,
    UMBPMasterClient,
    auth,
    rpc,
)
from mori.umbp.master.service import MAX_HEARTBEAT_STREAMS
from mori.umbp.rpc import pb, peer_pb

STREAM = "/umbp.UMBPMaster/HeartbeatStream"
WRONG = b"w" * 32


@pytest.fixture(autouse=True)
def _no_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UMBP_WIRE", "0")  # inherited by the master and peer processes


def _frames(*frames):
    yield from frames


def _frame(node: str, secret: bytes, request, method: str = STREAM):
    body = request.SerializeToString()
    return pb.SignedFrame(credential=auth.ClientAuth(node, lambda: secret).token(method, body) or "", body=body)


def _open(address: str, node: str | None, secret: bytes | None):
    """The raw HeartbeatStream multi-callable on a channel that signs the opening as ``node`` with
    ``secret`` (None: a plain channel, no credential at all)."""
    ch = grpc.insecure_channel(address) if node is None else rpc.channel(address, auth.ClientAuth(node, lambda: secret))
    return ch, rpc.pb_grpc.UMBPMasterStub(ch).HeartbeatStream


def _secret(master) -> bytes:
    return auth.member_secret(None, master.address)


def test_heartbeats_and_the_data_path_go_over_streams_and_store_every_byte():
    with owner_and_writer("owner", 32 * PAGE, "writer") as (master, owner, writer):
        data = np.random.default_rng(1).integers(0, 255, (8, PAGE), dtype=np.uint8)
        keys = [f"s{i}" for i in range(8)]
        assert all(writer.batch_put_from_ptr(keys, [int(r.ctypes.data) for r in data], [PAGE] * 8))
        out = np.zeros_like(data)
        assert all(writer.batch_get_into_ptr(keys, [int(r.ctypes.data) for r in out], [PAGE] * 8))
        assert np.array_equal(out, data)
        # The owner's heartbeat stream and the writer's peer streams were opened and answered.
        hb = owner._master._hb_stream
        assert hb._made == 1 and hb._refused_until == 0.0
        pools = {name: call._fallback for name, call in writer._peers[owner.peer_address][2].items()}
        assert pools["BatchResolveKeys"]._made >= 1 and pools["BatchResolveKeys"]._refused_until == 0.0
        used = pools["BatchPutInline"]._made + pools["BatchAllocateSlots"]._made
        assert used >= 1
        assert master.master.lookup(keys) == [True] * 8 or all(master.master.lookup(keys))


@pytest.mark.parametrize("opener", ["none", "wrong"])
def test_a_stream_opened_without_the_secret_is_refused_before_any_frame_is_read(opener):
    with MasterServer(master_config()) as master:
        secret = _secret(master)
        member = UMBPMasterClient(master.address, "member")
        member.register_self({}, "127.0.0.1:1", b"")
        before = sorted(master.master.alive_nodes())
        ch, open_ = _open(master.address, None if opener == "none" else "intruder", WRONG)
        # A frame that would be valid on its own: only the opening is wrong.
        frame = _frame("member", secret, pb.HeartbeatRequest(node_id="member", is_full_sync=True))
        with pytest.raises(grpc.RpcError) as err:
            next(open_(_frames(frame), timeout=5))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert sorted(master.master.alive_nodes()) == before
        ch.close()
        member.close()


@pytest.mark.parametrize("case", ["wrong secret", "another node", "replayed"])
def test_a_frame_that_does_not_verify_ends_the_stream_unread(case):
    with MasterServer(master_config()) as master:
        secret = _secret(master)
        ch, open_ = _open(master.address, "n1", secret)
        good = _frame("n1", secret, pb.HeartbeatRequest(node_id="n1"))
        bad = {
            "wrong secret": _frame("n1", WRONG, pb.HeartbeatRequest(node_id="n1", is_full_sync=True)),
            "another node": _frame("n2", secret, pb.HeartbeatRequest(node_id="n2", is_full_sync=True)),
            "replayed": good,
        }[case]
        answers = open_(_frames(good, bad), timeout=5)
        assert next(answers).status == pb.HeartbeatResponse.EXPIRED  # n1 is unknown: answered, as unary
        with pytest.raises(grpc.RpcError) as err:
            next(answers)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert not master.master.alive_nodes()
        ch.close()


def test_a_peer_stream_refuses_an_unsigned_frame():
    with owner_and_writer("owner", 8 * PAGE, "writer") as (master, owner, _writer):
        secret = _secret(master)
        method = "/umbp.UMBPPeer/BatchResolveKeysStream"
        ch = rpc.channel(owner.peer_address, auth.ClientAuth("writer", lambda: secret))
        open_ = rpc.peer_grpc.UMBPPeerStub(ch).BatchResolveKeysStream
        req = peer_pb.BatchResolveKeysRequest(keys=["k"])
        ok = _frame("writer", secret, req, method)
        answers = open_(_frames(ok, pb.SignedFrame(credential="", body=req.SerializeToString())), timeout=5)
        assert not next(answers).entries[0].found
        with pytest.raises(grpc.RpcError) as err:
            next(answers)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ch.close()


def test_a_client_without_the_secret_gets_an_authentication_error_over_the_stream():
    with MasterServer(master_config()) as master:
        intruder = UMBPMasterClient(master.address, "intruder", pool_secret=WRONG)
        with pytest.raises(AuthenticationError):
            intruder.heartbeat([], {})
        assert not master.master.alive_nodes()
        intruder.close()


def test_past_the_stream_limit_a_node_heartbeats_by_unary_calls():
    with MasterServer(master_config()) as master:
        nodes = [UMBPMasterClient(master.address, f"n{i}") for i in range(MAX_HEARTBEAT_STREAMS + 1)]
        try:
            for c in nodes:
                c.register_self({}, "127.0.0.1:1", b"")
                assert c.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
            on_stream = [c._hb_stream for c in nodes]
            refused = [p for p in on_stream if p._refused_until > 0]
            assert len(refused) == 1  # the last one: answered all the same, by a unary call
            assert refused[0] is nodes[-1]._hb_stream
            assert nodes[-1].heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
        finally:
            for c in nodes:
                c.close()


def test_a_master_that_dies_gives_an_error_not_a_hang():
    master = MasterProcess(free_port())
    client = UMBPMasterClient(master.address, "n1")
    try:
        client.register_self({}, "127.0.0.1:1", b"")
        assert client.heartbeat([], {}).status == pb.HeartbeatResponse.ALIVE
        master.kill()
        start = time.monotonic()
        with pytest.raises(MasterUnavailableError):
            client.heartbeat([], {})
        assert time.monotonic() - start < rpc.timeout_s() + 1.5
    finally:
        client.close()
        master.kill()
