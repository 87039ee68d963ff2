# SPDX-License-Identifier: MIT
"""The inline put (NOTE [inline put] in mori.umbp.peer.service): a block of at most
INLINE_MAX_BYTES in host memory is stored by the master's route plus one BatchPutInline to its
owner, which answers only once the block is committed and the master acknowledged it. The bound
is checked before any allocation, only members may call it, and an owner dying in the call leaves
no key reported stored that a get cannot read."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from conftest import (
    PAGE,
    assert_died_in_commit,
    assert_reads_back,
    cluster_with_a_dying_owner,
    count_peer_rpcs,
    make_client,
    master_config,
    member_peer_stub,
    signed_peer_stub,
)

from mori.umbp import InvalidArgumentError, MasterServer, rpc
from mori.umbp.client.pool_client import INLINE_GROUP_MAX_BYTES
from mori.umbp.peer.service import INLINE_BATCH_MAX_BYTES, INLINE_MAX_BYTES, PeerServicer
from mori.umbp.rpc import peer_pb

pytestmark = pytest.mark.timeout(90)

DRAM = 2
PEER_METHODS = ("BatchPutInline", "BatchAllocateSlots", "BatchCommitSlots", "AllocateSlot", "CommitSlot")


def _block(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


@pytest.fixture
def counted(monkeypatch):
    """Counts the peer RPCs served in this process, per method name."""
    return count_peer_rpcs(monkeypatch, PEER_METHODS)


def _entry(key: str, size: int) -> object:
    return peer_pb.PutInlineEntry(key=key, tier=DRAM, depth=-1, data=bytes(size))


def test_small_blocks_go_inline_with_their_exact_bytes(counted):
    assert INLINE_MAX_BYTES == PAGE  # the sizes below sit on either side of the bound
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 64 * PAGE) as owner,
        make_client(master.address, "writer") as w,
    ):
        # A single put at the bound: one BatchPutInline, no slot RPC; the bytes read back exactly,
        # by this writer and by a client that never saw the key (through the master).
        one = _block(1, INLINE_MAX_BYTES)
        assert w.put_from_ptr("one", one.ctypes.data, one.nbytes)
        assert counted == {"BatchPutInline": 1}
        assert owner.store.keys() == ["one"]
        back = np.zeros_like(one)
        assert w.get_into_ptr("one", back.ctypes.data, back.nbytes)
        assert np.array_equal(back, one)
        with make_client(master.address, "reader") as r:
            back[:] = 0
            assert r.get_into_ptr("one", back.ctypes.data, back.nbytes)
            assert np.array_equal(back, one)
        # A block that fills part of a page, and a batch of them: one BatchPutInline for the batch.
        counted.clear()
        blocks = [_block(10 + i, 1000 + i) for i in range(16)]
        keys = [f"b{i}" for i in range(16)]
        assert w.batch_put_from_ptr(keys, [b.ctypes.data for b in blocks], [b.nbytes for b in blocks]) == [True] * 16
        assert counted == {"BatchPutInline": 1}
        for key, block in zip(keys, blocks, strict=True):
            out = np.zeros_like(block)
            assert w.get_into_ptr(key, out.ctypes.data, out.nbytes)
            assert np.array_equal(out, block)
        # Putting a stored key again is reported stored, and changes nothing.
        assert w.put_from_ptr("one", _block(2, INLINE_MAX_BYTES).ctypes.data, INLINE_MAX_BYTES)
        back[:] = 0
        assert w.get_into_ptr("one", back.ctypes.data, back.nbytes)
        assert np.array_equal(back, one)
        # One byte over the bound takes the slot path (allocate, mori-io write, commit).
        counted.clear()
        big = _block(3, INLINE_MAX_BYTES + 1)
        assert w.put_from_ptr("big", big.ctypes.data, big.nbytes)
        assert counted == {"BatchAllocateSlots": 1, "BatchCommitSlots": 1}
        out = np.zeros_like(big)
        assert w.get_into_ptr("big", out.ctypes.data, out.nbytes)
        assert np.array_equal(out, big)


def test_an_oversized_inline_payload_is_refused_before_any_allocation():
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 64 * PAGE) as owner,
    ):
        free = owner.store.capacities()
        ch, stub = member_peer_stub(master.address, owner.peer_address, "inline-caller")
        with ch:
            # The first entry fits, the second is one byte over: nothing of the request is done.
            req = peer_pb.BatchPutInlineRequest(entries=[_entry("fits", 100), _entry("over", INLINE_MAX_BYTES + 1)])
            with pytest.raises(InvalidArgumentError, match=rf"entries\[1\]\.data={INLINE_MAX_BYTES + 1} bytes.*"):
                rpc.call("BatchPutInline", stub.BatchPutInline, req, InvalidArgumentError)
            with pytest.raises(InvalidArgumentError, match=f"INLINE_MAX_BYTES={INLINE_MAX_BYTES}"):
                rpc.call("BatchPutInline", stub.BatchPutInline, req, InvalidArgumentError)
            # Entries each within the bound but more bytes in all than a request carries.
            n = INLINE_BATCH_MAX_BYTES // INLINE_MAX_BYTES + 1
            req = peer_pb.BatchPutInlineRequest(entries=[_entry(f"e{i}", INLINE_MAX_BYTES) for i in range(n)])
            with pytest.raises(
                InvalidArgumentError, match=f"data={n * INLINE_MAX_BYTES} bytes.*{INLINE_BATCH_MAX_BYTES}"
            ):
                rpc.call("BatchPutInline", stub.BatchPutInline, req, InvalidArgumentError)
            assert owner.store.keys() == []
            assert owner.store.capacities() == free  # no page was taken, not even for the entry that fit
            # The same peer then takes a request within the bounds.
            ok = rpc.call(
                "BatchPutInline",
                stub.BatchPutInline,
                peer_pb.BatchPutInlineRequest(entries=[_entry("fits", 100)]),
                InvalidArgumentError,
            )
            assert [e.outcome for e in ok.entries] == [peer_pb.PutInlineResult.STORED]
        assert master.master.lookup(["fits", "over", "e0"]) == [True, False, False]


@pytest.mark.parametrize("secret", [None, b"w" * 32], ids=["no-credential", "wrong-secret"])
def test_an_unauthenticated_inline_put_is_refused_and_stores_nothing(secret):
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 64 * PAGE) as owner,
    ):
        free = owner.store.capacities()
        if secret is None:  # a plain channel, as any process on the host could open
            ch = grpc.insecure_channel(owner.peer_address)
            stub = rpc.peer_grpc.UMBPPeerStub(ch)
        else:
            ch, stub = signed_peer_stub(owner.peer_address, "inline-caller", secret)
        with ch:
            req = peer_pb.BatchPutInlineRequest(entries=[_entry("intruder-block", 100)])
            with pytest.raises(grpc.RpcError) as err:
                stub.BatchPutInline(req, timeout=2)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert owner.store.keys() == []
        assert owner.store.capacities() == free
        assert master.master.lookup(["intruder-block"]) == [False]


@pytest.mark.parametrize("when", ["before", "after"])
def test_an_owner_dying_in_an_inline_put_leaves_no_key_reported_stored_missing(when):
    """The doomed owner has the most room, so the master routes the put to it; it dies in the
    inline call, before committing or after committing with the master's acknowledgement. The put
    must then be stored on the live node (routed again) with its bytes, or not reported stored."""
    data = _block(4, 5000)
    with cluster_with_a_dying_owner(when, 128 * PAGE, {"node_id": "live", "capacity": 64 * PAGE}) as started:
        _, doomed, (live,), client = started
        ok = client.put_from_ptr("k", data.ctypes.data, data.nbytes)
        assert_died_in_commit(doomed)  # in the inline call
        assert ok is True  # routed again, past the dead owner
        assert live.ask("keys") == ["k"]
        assert_reads_back(client, ["k"], [data])


def test_a_peer_without_the_inline_call_gets_the_block_by_slots(counted, monkeypatch):
    """A peer of an older version answers BatchPutInline UNIMPLEMENTED (as gRPC does for a method
    it does not serve): the put still lands on that peer, the only owner, by the slot path, and
    the client does not ask that peer inline again."""
    asked = []

    def older(self, req, ctx):
        asked.append(len(req.entries))
        ctx.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")

    monkeypatch.setattr(PeerServicer, "BatchPutInline", older)  # before the peer registers its handlers
    # An older peer has no stream of the call either: the generated base answers UNIMPLEMENTED.
    monkeypatch.setattr(PeerServicer, "BatchPutInlineStream", rpc.peer_grpc.UMBPPeerServicer.BatchPutInlineStream)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 64 * PAGE) as owner,
        make_client(master.address, "writer") as w,
    ):
        data = [_block(20 + i, 4000) for i in range(2)]
        assert w.put_from_ptr("a", data[0].ctypes.data, 4000)
        assert w.put_from_ptr("b", data[1].ctypes.data, 4000)
        assert asked == [1]
        assert sorted(owner.store.keys()) == ["a", "b"]
        assert counted["BatchAllocateSlots"] == 2 and counted["BatchCommitSlots"] == 2
        for key, value in zip("ab", data, strict=True):
            out = np.zeros_like(value)
            assert w.get_into_ptr(key, out.ctypes.data, out.nbytes)
            assert np.array_equal(out, value)


def test_a_peer_share_over_the_group_bound_takes_the_slot_path(counted):
    """NOTE [inline or slots]: small blocks go inline only while their owner's share of the batch
    is at most INLINE_GROUP_MAX_BYTES; one byte more and the whole share goes by slots (one
    allocate, one mori-io write, one commit). Either way every byte reads back exactly."""
    per = INLINE_MAX_BYTES // 2
    n = INLINE_GROUP_MAX_BYTES // per
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 256 * PAGE),
        make_client(master.address, "writer") as w,
    ):
        for keys, size, path in (
            ([f"at{i}" for i in range(n)], per, {"BatchPutInline": 1}),  # exactly the bound
            ([f"over{i}" for i in range(n)], per + 1, {"BatchAllocateSlots": 1, "BatchCommitSlots": 1}),
        ):
            counted.clear()
            blocks = [_block(100 + i, size) for i in range(n)]
            assert w.batch_put_from_ptr(keys, [b.ctypes.data for b in blocks], [size] * n) == [True] * n
            assert counted == path
            for key, block in zip(keys, blocks, strict=True):
                out = np.zeros_like(block)
                assert w.get_into_ptr(key, out.ctypes.data, size)
                assert np.array_equal(out, block)
