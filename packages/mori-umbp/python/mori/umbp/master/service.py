# SPDX-License-Identifier: MIT
"""The UMBPMaster gRPC servicer: translates messages to and from ``Master`` calls."""

from __future__ import annotations

from typing import Any

from mori.umbp.master.core import Master
from mori.umbp.master.store import NodeInfo
from mori.umbp.rpc import pb, pb_grpc


def _caps(items: Any) -> dict[int, tuple[int, int]]:
    return {int(c.tier): (int(c.total), int(c.available)) for c in items}


class MasterServicer(pb_grpc.UMBPMasterServicer):
    def __init__(self, master: Master) -> None:
        self.m = master

    def _count(self, rpc: str) -> None:
        self.m.metrics.rpcs.labels(rpc).inc()

    def RegisterClient(self, req: Any, ctx: Any) -> Any:
        self._count("RegisterClient")
        info = NodeInfo(
            req.node_id,
            req.node_address,
            req.peer_address,
            bytes(req.engine_desc),
            list(req.tags),
            _caps(req.tier_capacities),
        )
        self.m.register(info)
        interval_ms = int(self.m.timing.heartbeat_interval_s * 1000)
        return pb.RegisterClientResponse(heartbeat_interval_ms=interval_ms, ack_seq=0)

    def UnregisterClient(self, req: Any, ctx: Any) -> Any:
        self._count("UnregisterClient")
        self.m.unregister(req.node_id)
        return pb.UnregisterClientResponse()

    def Heartbeat(self, req: Any, ctx: Any) -> Any:
        self._count("Heartbeat")
        bundles = [
            (int(b.seq), [(int(e.kind), e.key, int(e.tier), int(e.size)) for e in b.events]) for b in req.bundles
        ]
        res = self.m.heartbeat(
            req.node_id, bundles, req.is_full_sync, int(req.delta_seq_baseline), _caps(req.tier_capacities)
        )
        status = pb.HeartbeatResponse.ALIVE if res.known else pb.HeartbeatResponse.EXPIRED
        return pb.HeartbeatResponse(status=status, acked_seq=res.acked_seq, request_full_sync=res.request_full_sync)

    def RouteGet(self, req: Any, ctx: Any) -> Any:
        self._count("RouteGet")
        (hit,) = self.m.route_get([req.key], set(req.exclude_nodes))
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
        (route,) = self.m.route_put([req.key], [int(req.block_size)], set(req.exclude_nodes))
        return self._put_entry(route)

    def BatchRoutePut(self, req: Any, ctx: Any) -> Any:
        self._count("BatchRoutePut")
        if len(req.keys) != len(req.block_sizes):
            ctx.abort(3, f"keys has {len(req.keys)} entries but block_sizes {len(req.block_sizes)}")  # INVALID_ARGUMENT
        routes = self.m.route_put(list(req.keys), [int(s) for s in req.block_sizes], set(req.exclude_nodes))
        return pb.BatchRoutePutResponse(entries=[self._put_entry(r) for r in routes])

    def BatchRouteGet(self, req: Any, ctx: Any) -> Any:
        self._count("BatchRouteGet")
        res = pb.BatchRouteGetResponse()
        refs: dict[str, int] = {}
        for hit in self.m.route_get(list(req.keys), set(req.exclude_nodes)):
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
        return pb.BatchLookupResponse(found=self.m.lookup(list(req.keys)))
