# SPDX-License-Identifier: MIT
"""``UMBPMasterClient``: MORI's lightweight control-plane client of the master.

The channel is lazy, so construction never fails; every call has the UMBP_RPC_TIMEOUT_MS
deadline and raises ``MasterUnavailableError`` when the master does not answer in time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mori.umbp import columns, rpc
from mori.umbp.auth import ClientAuth, SecretSource
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvNodeMatch
from mori.umbp.errors import InvalidArgumentError, MasterUnavailableError
from mori.umbp.master.service import WIRE_CALLS
from mori.umbp.peer.events import Event
from mori.umbp.stream import StreamPool
from mori.umbp.types import PEER_TIERS, UMBPTierType, check_key, check_keys, check_node_id, check_tier
from mori.umbp.wire import WireCall, WireChannel

#: Wire connections (NOTE [wire] in mori.umbp.wire) a node keeps to its master: its heartbeat and
#: three client threads' calls at once; a call past them is made over gRPC.
MASTER_WIRE_CONNECTIONS = 4


def _caps(capacities: dict[int, tuple[int, int]]) -> list[Any]:
    return [rpc.pb.TierCapacity(tier=int(t), total=tot, available=av) for t, (tot, av) in capacities.items()]


class UMBPMasterClient:
    def __init__(
        self, master_address: str, node_id: str = "", node_address: str = "", pool_secret: bytes | None = None
    ) -> None:
        """``pool_secret`` None: UMBP_POOL_SECRET, else the master's secret file on this host, looked
        up at each call until found (NOTE [pool authentication])."""
        if node_id:
            check_node_id(node_id)
        self.master_address = master_address
        self.node_id = node_id
        self.node_address = node_address
        client_auth = ClientAuth(node_id, SecretSource(pool_secret, master_address))
        self._channel = rpc.channel(master_address, client_auth)
        self._stub = rpc.pb_grpc.UMBPMasterStub(self._channel)
        # NOTE [heartbeat stream]: one stream, else (refused, or busy) the unary Heartbeat.
        hb_stream = StreamPool(
            self._stub.HeartbeatStream,
            self._stub.Heartbeat,
            rpc.pb.SignedFrame,
            f"Heartbeat to master {master_address}",
            1,
        )
        # NOTE [wire] in mori.umbp.wire: the put and get paths' calls over plain TCP where the
        # master's registration answer names a port, else gRPC (heartbeats over their stream).
        self._wire_port = 0
        self._event_columns = False  # until a registration says the master reads them
        self._wire = WireChannel(master_address, lambda _timeout: self._wire_port, client_auth, MASTER_WIRE_CONNECTIONS)
        self._wire_calls = {
            name: WireCall(
                self._wire,
                name,
                getattr(rpc.pb, f"{name}Response").FromString,
                hb_stream if name == "Heartbeat" else getattr(self._stub, name),
            )
            for name in WIRE_CALLS
        }
        self._hb_stream = hb_stream
        self._registered = False
        self.registered_view: Any = None  # the PoolView of the last registration's answer

    def __repr__(self) -> str:
        return f"UMBPMasterClient(master_address={self.master_address!r}, node_id={self.node_id!r})"

    def _call(self, name: str, request: Any) -> Any:
        fn = self._wire_calls.get(name) or getattr(self._stub, name)
        return rpc.call(f"{name} to master {self.master_address}", fn, request, MasterUnavailableError)

    # -- registry (MORI's names) ------------------------------------------------------------------
    def register_self(
        self,
        tier_capacities: dict[UMBPTierType, tuple[int, int]],
        peer_address: str = "",
        engine_desc: bytes = b"",
        tags: Sequence[str] = (),
    ) -> int:
        """Registers this node with {tier: (total, available)}; returns the heartbeat interval in ms."""
        check_node_id(self.node_id)
        caps = {int(check_tier("tier_capacities key", t)): (int(a), int(b)) for t, (a, b) in tier_capacities.items()}
        req = rpc.pb.RegisterClientRequest(
            node_id=self.node_id,
            node_address=self.node_address,
            tier_capacities=_caps(caps),
            peer_address=peer_address,
            engine_desc=engine_desc,
            tags=list(tags),
        )
        res = self._call("RegisterClient", req)
        self._registered = True
        self.registered_view = res.pool_view  # NOTE [direct put]
        self._event_columns = bool(res.event_columns)  # NOTE [columns] in mori.umbp.columns
        if int(res.wire_port) != self._wire_port:  # a restarted master listens elsewhere
            self._wire_port = int(res.wire_port)
            self._wire.moved()
        return int(res.heartbeat_interval_ms)

    def unregister_self(self) -> None:
        self._call("UnregisterClient", rpc.pb.UnregisterClientRequest(node_id=check_node_id(self.node_id)))
        self._registered = False

    def is_registered(self) -> bool:
        return self._registered

    def heartbeat(
        self,
        bundles: list[tuple[int, list[Event]]],
        capacities: dict[int, tuple[int, int]],
        is_full_sync: bool = False,
        baseline: int = 0,
        accessed: Sequence[str] = (),
        want_pool_view: bool = False,
    ) -> Any:
        pb = rpc.pb
        req = pb.HeartbeatRequest(
            node_id=self.node_id,
            is_full_sync=is_full_sync,
            delta_seq_baseline=baseline,
            tier_capacities=_caps(capacities),
            accessed_keys=list(accessed),
            bundles=[columns.event_bundle(seq, evs, self._event_columns) for seq, evs in bundles],
            want_pool_view=want_pool_view,
        )
        return self._call("Heartbeat", req)

    # -- routing ------------------------------------------------------------------------------
    def route_get(self, key: str, exclude_nodes: Sequence[str] = ()) -> Any:
        req = rpc.pb.RouteGetRequest(key=check_key(key), node_id=self.node_id, exclude_nodes=list(exclude_nodes))
        return self._call("RouteGet", req)

    def batch_route_put(self, keys: Sequence[str], sizes: Sequence[int], exclude_nodes: Sequence[str] = ()) -> Any:
        keys = check_keys(keys)
        req = rpc.pb.BatchRoutePutRequest(
            node_id=self.node_id, keys=list(keys), block_sizes=list(sizes), exclude_nodes=list(exclude_nodes)
        )
        return self._call("BatchRoutePut", req).entries

    def batch_route_get(self, keys: Sequence[str], exclude_nodes: Sequence[str] = ()) -> Any:
        keys = check_keys(keys)
        req = rpc.pb.BatchRouteGetRequest(node_id=self.node_id, keys=list(keys), exclude_nodes=list(exclude_nodes))
        return self._call("BatchRouteGet", req)

    def batch_lookup(self, keys: Sequence[str]) -> list[bool]:
        keys = check_keys(keys)
        res = self._call("BatchLookup", rpc.pb.BatchLookupRequest(node_id=self.node_id, keys=keys))
        return [bool(f) for f in res.found]

    # -- external KV (blocks UMBP does not own) ----------------------------------------------------
    @staticmethod
    def _hashes(hashes: Sequence[str]) -> list[str]:
        """Each hash checked as a key; an empty list is valid (MORI's master answers it with no
        match, no count, no change)."""
        if isinstance(hashes, (str, bytes)) or not isinstance(hashes, Sequence):
            raise InvalidArgumentError(f"hashes={hashes!r} must be a list of str, not {type(hashes).__name__}")
        return check_keys(hashes, "hashes")

    def report_external_kv_blocks(self, node_id: str, hashes: Sequence[str], tier: UMBPTierType) -> None:
        """Adds ``hashes`` at ``tier`` for ``node_id`` (ignored by the master unless the node is ALIVE)."""
        req = rpc.pb.ReportExternalKvBlocksRequest(
            node_id=check_node_id(node_id), hashes=self._hashes(hashes), tier=int(check_tier("tier", tier, PEER_TIERS))
        )
        self._call("ReportExternalKvBlocks", req)

    def revoke_external_kv_blocks(self, node_id: str, hashes: Sequence[str], tier: UMBPTierType) -> None:
        """Drops ``hashes`` at ``tier`` for ``node_id``; works for dead nodes too."""
        req = rpc.pb.RevokeExternalKvBlocksRequest(
            node_id=check_node_id(node_id), hashes=self._hashes(hashes), tier=int(check_tier("tier", tier, PEER_TIERS))
        )
        self._call("RevokeExternalKvBlocks", req)

    def revoke_all_external_kv_blocks_at_tier(self, node_id: str, tier: UMBPTierType) -> None:
        req = rpc.pb.RevokeAllExternalKvBlocksAtTierRequest(
            node_id=check_node_id(node_id), tier=int(check_tier("tier", tier, PEER_TIERS))
        )
        self._call("RevokeAllExternalKvBlocksAtTier", req)

    def match_external_kv(self, hashes: Sequence[str], count_as_hit: bool = False) -> list[UMBPExternalKvNodeMatch]:
        """Which alive nodes hold which of ``hashes``; ``count_as_hit`` bumps each unique matched
        hash's lifetime counter once. More than UMBP_HIT_QUERY_MAX_BATCH hashes: InvalidArgumentError."""
        req = rpc.pb.MatchExternalKvRequest(hashes=self._hashes(hashes), count_as_hit=bool(count_as_hit))
        return [UMBPExternalKvNodeMatch.from_pb(m) for m in self._call("MatchExternalKv", req).matches]

    def get_external_kv_hit_counts(self, hashes: Sequence[str]) -> list[UMBPExternalKvHitCountEntry]:
        """Sparse lifetime hit counts: a hash never counted (or expired) has no entry."""
        req = rpc.pb.GetExternalKvHitCountsRequest(hashes=self._hashes(hashes))
        res = self._call("GetExternalKvHitCounts", req)
        return [UMBPExternalKvHitCountEntry(e.hash, int(e.hit_count_total)) for e in res.entries]

    def close(self) -> None:
        for call in self._wire_calls.values():
            call.close()
        self._channel.close()
