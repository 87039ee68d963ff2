# SPDX-License-Identifier: MIT
"""Keys and node ids: empty, separator-bearing or over their length setting raise the typed error
naming the argument, the value and the limit, before any RPC (the master address below has
nothing listening: an RPC would raise MasterUnavailableError instead); a member sending one
anyway is refused INVALID_ARGUMENT by the master."""

from __future__ import annotations

import grpc
import pytest
from conftest import PAGE, free_port, make_client, master_config

from mori.umbp import (
    InvalidKeyError,
    InvalidNodeIdError,
    MasterServer,
    UMBPClient,
    UMBPConfig,
    UMBPMasterClient,
    UMBPTierType,
    auth,
    rpc,
)
from mori.umbp.client.config import UMBPDistributedConfig, UMBPDramConfig, UMBPMasterClientConfig
from mori.umbp.rpc import pb
from mori.umbp.types import check_keys

NOWHERE = f"127.0.0.1:{free_port()}"
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
