# SPDX-License-Identifier: MIT
"""Keys and node ids: empty, separator-bearing or over their length setting raise the typed error
naming the argument, the value and the limit, before any RPC (the master address below has
nothing listening: an RPC would raise MasterUnavailableError instead); a member sending one
anyway is refused INVALID_ARGUMENT by the master."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from conftest import PAGE, StubContext, bare_peer, free_port, make_client, master_config, member_peer_stub
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from mori.umbp import (
    InvalidKeyError,
    InvalidNodeIdError,
    MasterServer,
    UMBPClient,
    UMBPConfig,
    UMBPMasterClient,
    UMBPTierType,
    auth,
    columns,
    rpc,
)
from mori.umbp.client.config import UMBPDistributedConfig, UMBPDramConfig, UMBPMasterClientConfig
from mori.umbp.rpc import pb, peer_pb
from mori.umbp.types import all_plain_keys, check_key, check_keys

NOWHERE = f"127.0.0.1:{free_port()}"
DRAM = int(UMBPTierType.DRAM)
BAD_NODE_IDS = [
    ("", "node_id='' must not be empty"),
    ("a b", "holds ' '"),
    ("a\tb", "holds '\\\\t'"),
    ("x" * 257, "257 bytes long; the limit is UMBP_MAX_NODE_ID_BYTES=256"),
    ("x" * (1 << 20), r"'xxxx.*\.\.\. \(1048576 chars\) is 1048576 bytes long; the limit is UMBP_MAX_NODE_ID_BYTES"),
]
BAD_KEYS = [
    ("", "keys\\[0\\]='' must not be empty"),
    ("a|b", "holds '|'"),
    ("a\nb", "holds '\\\\n'"),
    ("k" * (1 << 20), "1048576 bytes long; the limit is UMBP_MAX_KEY_BYTES=1024"),
]


@pytest.mark.parametrize(("node_id", "why"), BAD_NODE_IDS)
def test_bad_node_ids_raise_before_any_rpc(node_id, why):
    with pytest.raises(InvalidNodeIdError, match=why):
        UMBPMasterClient(NOWHERE, node_id if node_id else "ok").report_external_kv_blocks(
            node_id, ["h"], UMBPTierType.DRAM
        )
    if node_id:
        with pytest.raises(InvalidNodeIdError, match=why):
            UMBPMasterClient(NOWHERE, node_id)
        config = UMBPConfig(UMBPDramConfig(0, PAGE), UMBPDistributedConfig(UMBPMasterClientConfig(NOWHERE, node_id)))
        with pytest.raises(InvalidNodeIdError, match=why.replace("node_id", "master_config.node_id")):
            UMBPClient(config)


@pytest.mark.parametrize(("key", "why"), BAD_KEYS)
def test_bad_keys_raise_before_any_rpc(key, why):
    mc = UMBPMasterClient(NOWHERE, "checker")
    for call in (mc.batch_route_put, mc.batch_route_get, mc.batch_lookup):
        args = ([key], [PAGE]) if call == mc.batch_route_put else ([key],)
        with pytest.raises(InvalidKeyError, match=why):
            call(*args)
    mc.close()


@pytest.mark.parametrize("key", [key for key, _ in BAD_KEYS] + ["k" * 1025, "a\x00", "a b", 7])
@pytest.mark.parametrize("where", [0, 150, 299])
def test_one_bad_key_in_a_chain_is_named_by_its_place(key, where):
    """check_keys takes a whole chain of valid ASCII keys in one pass (mori.umbp.types); one bad key
    anywhere in it still raises, naming its index. Valid keys of every kind pass as given."""
    chain = [f"req/{i:04d}/block" for i in range(300)]
    assert check_keys(chain) == chain
    assert check_keys(["é", "k" * 1024, "a/b:c#d"]) == ["é", "k" * 1024, "a/b:c#d"]
    chain[where] = key
    with pytest.raises(InvalidKeyError, match=rf"^keys\[{where}\]="):
        check_keys(chain)


def test_the_master_refuses_bad_keys_and_ids_from_a_member():
    with MasterServer(master_config()) as master, make_client(master.address, "names-peer", 4 * PAGE):
        secret = auth.member_secret(None, master.address)
        assert secret is not None
        with rpc.channel(master.address, auth.ClientAuth("a\tb", lambda: secret)) as ch:
            stub = rpc.pb_grpc.UMBPMasterStub(ch)
            for name, req in (
                ("BatchRoutePut", pb.BatchRoutePutRequest(keys=["a|b"], block_sizes=[PAGE])),
                ("BatchRouteGet", pb.BatchRouteGetRequest(keys=[""])),
                ("RouteGet", pb.RouteGetRequest(key="k" * 2000)),
                ("BatchLookup", pb.BatchLookupRequest(keys=["a b"])),
                ("RegisterClient", pb.RegisterClientRequest(node_id="a\tb", peer_address="x:1")),
            ):
                with pytest.raises(grpc.RpcError) as err:
                    getattr(stub, name)(req, timeout=2)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert master.master.store.get_node("a\tb") is None


def _passes(key: object, limit: int) -> bool:
    try:
        check_key(key, "key", limit)
    except InvalidKeyError:
        return False
    return True


# Keys near the edges: every ASCII character (the space, '|', controls, DEL among them), a few
# non-ASCII ones (which the one-pass check leaves to the key-by-key one), lengths about the limit.
_KEY_CHARS = st.sampled_from([chr(c) for c in range(0x80)] + ["\u00e9", "\u00a0", "\u2028", "\U0001f600"])
_KEYS = st.lists(st.text(_KEY_CHARS, min_size=0, max_size=12) | st.sampled_from(["k" * 16, "k" * 17]), max_size=8)


@hsettings(max_examples=400, deadline=None)
@given(keys=_KEYS)
def test_a_chain_passes_in_one_pass_exactly_when_every_key_passes_its_own_check(keys):
    """all_plain_keys (one pass over the joined chain) against check_key of each key, the
    reference: True only when every key passes and is ASCII; check_keys agrees with the reference
    either way."""
    limit = 16
    one_by_one = all(_passes(k, limit) for k in keys)
    assert all_plain_keys(keys, limit) == (one_by_one and all(k.isascii() for k in keys))
    assert all_plain_keys([*keys, 7], limit) is False  # a key that is not a str never passes in one pass


@pytest.mark.parametrize("bad", ["a|b", "a b", "a\x7fb", "", "k" * 1025])
def test_a_peer_refuses_a_members_bad_key_and_serves_the_rest_of_its_batch(bad):
    """A peer checks a batch's keys in one pass and, when that fails, key by key: a member that
    skips the client's checks gets the bad key refused by name and the rest of its batch served,
    by slots and inline (those stored, byte for byte, and indexed at the master)."""
    _, peer = bare_peer(16)
    claims = [("good-0", PAGE, DRAM, 0), (bad, PAGE, DRAM, 1), ("good-2", PAGE, DRAM, 2)]
    answers = columns.allocations_of(peer.BatchAllocateSlots(columns.allocate_request(claims, True), StubContext()), 3)
    allocated = peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
    assert [a.outcome == allocated for a in answers] == [True, False, True]
    assert answers[1].message.startswith("key=")
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 16 * PAGE) as owner,
        make_client(master.address, "reader", 0) as reader,
    ):
        ch, stub = member_peer_stub(master.address, owner.peer_address, "member")
        blocks = {key: bytes([7 + i]) * 100 for i, key in enumerate(["inline-0", bad, "inline-2"])}
        entries = [peer_pb.PutInlineEntry(key=k, tier=DRAM, depth=-1, data=v) for k, v in blocks.items()]
        with ch:
            res = stub.BatchPutInline(peer_pb.BatchPutInlineRequest(entries=entries), timeout=5)
        result = peer_pb.PutInlineResult
        assert [e.outcome for e in res.entries] == [result.STORED, result.FAILED, result.STORED]
        assert res.entries[1].message.startswith("key=")
        assert sorted(owner.store.keys()) == ["inline-0", "inline-2"]
        for key in ("inline-0", "inline-2"):
            out = np.zeros(100, np.uint8)
            assert reader.get_into_ptr(key, out.ctypes.data, 100)
            assert out.tobytes() == blocks[key]
