# SPDX-License-Identifier: MIT
"""The UMBPMaster gRPC servicer: translates messages to and from ``Master`` calls."""

from __future__ import annotations

import time
from typing import Any

import grpc  # type: ignore[import-untyped]

from mori.umbp import columns
from mori.umbp.auth import caller_node
from mori.umbp.errors import InvalidArgumentError
from mori.umbp.master.core import Master
from mori.umbp.master.store import NodeInfo
from mori.umbp.rpc import pb, pb_grpc
from mori.umbp.stream import StreamSlots
from mori.umbp.types import PEER_TIERS, check_keys, check_node_id, check_tier


def _caps(items: Any) -> dict[int, tuple[int, int]]:
    return {int(c.tier): (int(c.total), int(c.available)) for c in items}


#: Heartbeat streams a master serves at once (NOTE [heartbeat stream] in mori.umbp.stream): each
#: holds one of the server's 16 workers while open, so at most half of them; a node refused one
#: heartbeats by unary calls.
MAX_HEARTBEAT_STREAMS = 8
#: The calls a master serves over NOTE [wire] (mori.umbp.wire): those of the put and get paths.
WIRE_CALLS = ("Heartbeat", "RouteGet", "BatchRoutePut", "BatchRouteGet", "BatchLookup")
#: Wire connections a master holds at once, a thread each (a node opens at most
#: MASTER_WIRE_CONNECTIONS of mori.umbp.client.master_client); past them a caller uses gRPC.
MAX_MASTER_WIRES = 256

#: Accessed keys one heartbeat may report; the rest are ignored (an access is a hint).
MAX_ACCESSED = 4096


class MasterServicer(pb_grpc.UMBPMasterServicer):
    def __init__(
        self, master: Master, hit_query_max_batch: int = 4096, max_streams: int = MAX_HEARTBEAT_STREAMS
    ) -> None:
        self.m = master
        self.max_batch = hit_query_max_batch
        self.streams = StreamSlots(max_streams, "use the unary Heartbeat")
        self.wire_port = 0  # NOTE [wire] in mori.umbp.wire: set once the master's wire server listens

    def _hashes(self, req: Any, ctx: Any, limit: bool) -> list[str]:
        """The request's hashes, checked; a bad one aborts the RPC with INVALID_ARGUMENT."""
        hashes = list(req.hashes)
        try:
            if limit and len(hashes) > self.max_batch:
                raise InvalidArgumentError(
                    f"{len(hashes)} hashes exceed UMBP_HIT_QUERY_MAX_BATCH={self.max_batch} per call"
                )
            check_keys(hashes, "hashes")
        except InvalidArgumentError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return hashes

    @staticmethod
    def _node(req: Any, ctx: Any) -> str:
        """The request's node_id; '' names no node and aborts the RPC with INVALID_ARGUMENT."""
        if not req.node_id:
            ctx.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "node_id='' must be a non-empty str (the node the call is about)"
            )
        return str(req.node_id)

    def _tier(self, req: Any, ctx: Any) -> int:
        try:
            return int(check_tier("tier", int(req.tier), PEER_TIERS))
        except InvalidArgumentError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # unreachable: abort raises

    @staticmethod
    def _own(node_id: str, ctx: Any) -> None:
        """A node registers, heartbeats and unregisters only itself: the id it signed with."""
        try:
            check_node_id(node_id)
        except InvalidArgumentError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if node_id != caller_node.get():
            ctx.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"node_id={node_id!r} is not the caller's own ({caller_node.get()!r})",
            )

    @staticmethod
    def _keys(keys: Any, ctx: Any) -> list[str]:
        try:
            return check_keys(keys)
        except InvalidArgumentError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise  # unreachable: abort raises

    # -- external KV ----------------------------------------------------------------------------
    def ReportExternalKvBlocks(self, req: Any, ctx: Any) -> Any:
        self._count("ReportExternalKvBlocks")
        node, hashes, tier = self._node(req, ctx), self._hashes(req, ctx, False), self._tier(req, ctx)
        if node in self.m.alive_nodes():  # MORI: a report of a node not ALIVE is ignored
            self.m.external_kv.report(req.node_id, hashes, tier)
        return pb.ReportExternalKvBlocksResponse()

    def RevokeExternalKvBlocks(self, req: Any, ctx: Any) -> Any:
        self._count("RevokeExternalKvBlocks")
        self.m.external_kv.revoke(self._node(req, ctx), self._hashes(req, ctx, False), self._tier(req, ctx))
        return pb.RevokeExternalKvBlocksResponse()

    def RevokeAllExternalKvBlocksAtTier(self, req: Any, ctx: Any) -> Any:
        self._count("RevokeAllExternalKvBlocksAtTier")
        self.m.external_kv.revoke_tier(self._node(req, ctx), self._tier(req, ctx))
        return pb.RevokeAllExternalKvBlocksAtTierResponse()

    def MatchExternalKv(self, req: Any, ctx: Any) -> Any:
        self._count("MatchExternalKv")
        hashes = self._hashes(req, ctx, True)
        alive = self.m.alive_nodes()
        found = self.m.external_kv.match(hashes, set(alive), req.count_as_hit, time.time())
        return pb.MatchExternalKvResponse(
            matches=[
                pb.ExternalKvNodeMatch(
                    node_id=m.node_id,
                    peer_address=alive[m.node_id].peer_address,
                    hashes_by_tier=[pb.ExternalKvTierHashes(tier=t, hashes=hs) for t, hs in m.hashes_by_tier.items()],
                )
                for m in found
            ]
        )

    def GetExternalKvHitCounts(self, req: Any, ctx: Any) -> Any:
        self._count("GetExternalKvHitCounts")
        counts = self.m.external_kv.hit_counts(self._hashes(req, ctx, True))
        return pb.GetExternalKvHitCountsResponse(
            entries=[pb.ExternalKvHitCountEntry(hash=h, hit_count_total=n) for h, n in counts]
        )

    def _count(self, rpc: str) -> None:
        self.m.metrics.child(self.m.metrics.rpcs, rpc).inc()

    def RegisterClient(self, req: Any, ctx: Any) -> Any:
        self._count("RegisterClient")
        self._own(req.node_id, ctx)
        info = NodeInfo(
            self._node(req, ctx),
            req.node_address,
            req.peer_address,
            bytes(req.engine_desc),
            list(req.tags),
            _caps(req.tier_capacities),
        )
        self.m.register(info)
        interval_ms = int(self.m.timing.heartbeat_interval_s * 1000)
        return pb.RegisterClientResponse(
            heartbeat_interval_ms=interval_ms,
            ack_seq=0,
            pool_view=self._pool_view(),
            wire_port=self.wire_port,
            event_columns=True,  # NOTE [columns] in mori.umbp.columns
        )

    def _pool_view(self) -> Any:
        """NOTE [direct put]: the alive nodes and the placement policy, for clients that place puts."""
        nodes = [
            pb.PoolNode(
                node_id=n.node_id,
                peer_address=n.peer_address,
                engine_desc=n.engine_desc,
                tier_capacities=[
                    pb.TierCapacity(tier=t, total=total, available=avail) for t, (total, avail) in n.capacities.items()
                ],
            )
            for n in self.m.pool_view()
        ]
        return pb.PoolView(nodes=nodes, put_algo=self.m.put_algo, put_affinity=self.m.put_affinity)

    def UnregisterClient(self, req: Any, ctx: Any) -> Any:
        self._count("UnregisterClient")
        self._own(req.node_id, ctx)
        self.m.unregister(req.node_id)
        return pb.UnregisterClientResponse()

    def Heartbeat(self, req: Any, ctx: Any) -> Any:
        self._count("Heartbeat")
        self._own(req.node_id, ctx)
        try:  # NOTE [columns] in mori.umbp.columns: either form
            bundles = [(int(b.seq), columns.events_of(b)) for b in req.bundles]
        except ValueError as exc:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Heartbeat: {exc}")
        res = self.m.heartbeat(
            req.node_id, bundles, req.is_full_sync, int(req.delta_seq_baseline), _caps(req.tier_capacities)
        )
        if res.known and req.accessed_keys:
            self.m.record_accesses(list(req.accessed_keys[:MAX_ACCESSED]))
        status = pb.HeartbeatResponse.ALIVE if res.known else pb.HeartbeatResponse.EXPIRED
        out = pb.HeartbeatResponse(
            status=status, acked_seq=res.acked_seq, request_full_sync=res.request_full_sync, refused_keys=res.refused
        )
        if res.known and req.want_pool_view:
            out.pool_view.CopyFrom(self._pool_view())
        return out

    def HeartbeatStream(self, bodies: Any, ctx: Any) -> Any:
        """NOTE [heartbeat stream]: heartbeats of one node, answered in order; ``bodies`` are the
        frames' HeartbeatRequest bytes, each already checked by the pool credential."""
        yield from self.streams.serve(bodies, ctx, pb.HeartbeatRequest.FromString, self.Heartbeat)

    def RouteGet(self, req: Any, ctx: Any) -> Any:
        self._count("RouteGet")
        (hit,) = self.m.route_get(self._keys([req.key], ctx), set(req.exclude_nodes))
        if hit is None:
            return pb.RouteGetResponse(found=False)
        loc, node = hit
        return pb.RouteGetResponse(
            found=True,
            node_id=loc.node_id,
            tier=loc.tier,
            size=loc.size,
            peer_address=node.peer_address,
            engine_desc=node.engine_desc,
        )

    def _put_entry(self, route: Any) -> Any:
        outcome = getattr(pb, route.outcome)
        if route.node is None:
            return pb.RoutePutResponse(outcome=outcome)
        return pb.RoutePutResponse(
            outcome=outcome,
            node_id=route.node.node_id,
            tier=route.tier,
            peer_address=route.node.peer_address,
            engine_desc=route.node.engine_desc,
        )

    def RoutePut(self, req: Any, ctx: Any) -> Any:
        self._count("RoutePut")
        keys = self._keys([req.key], ctx)
        (route,) = self.m.route_put(keys, [int(req.block_size)], set(req.exclude_nodes), req.node_id)
        return self._put_entry(route)

    def BatchRoutePut(self, req: Any, ctx: Any) -> Any:
        self._count("BatchRoutePut")
        if len(req.keys) != len(req.block_sizes):
            ctx.abort(3, f"keys has {len(req.keys)} entries but block_sizes {len(req.block_sizes)}")  # INVALID_ARGUMENT
        routes = self.m.route_put(
            self._keys(req.keys, ctx), [int(s) for s in req.block_sizes], set(req.exclude_nodes), req.node_id
        )
        return pb.BatchRoutePutResponse(entries=[self._put_entry(r) for r in routes])

    def BatchRouteGet(self, req: Any, ctx: Any) -> Any:
        self._count("BatchRouteGet")
        res = pb.BatchRouteGetResponse()
        refs: dict[str, int] = {}
        for hit in self.m.route_get(self._keys(req.keys, ctx), set(req.exclude_nodes)):
            if hit is None:
                res.node_ref.append(0)
                res.tier.append(0)
                res.size.append(0)
                continue
            loc, node = hit
            if node.node_id not in refs:
                res.nodes.append(
                    pb.RouteNode(node_id=node.node_id, peer_address=node.peer_address, engine_desc=node.engine_desc)
                )
                refs[node.node_id] = len(res.nodes)
            res.node_ref.append(refs[node.node_id])
            res.tier.append(loc.tier)
            res.size.append(loc.size)
        return res

    def BatchLookup(self, req: Any, ctx: Any) -> Any:
        self._count("BatchLookup")
        return pb.BatchLookupResponse(found=self.m.lookup(self._keys(req.keys, ctx)))
