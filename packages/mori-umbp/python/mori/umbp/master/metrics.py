# SPDX-License-Identifier: MIT
"""Prometheus metrics of the master (MORI's ``mori_umbp_*`` families), one registry per server."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge  # type: ignore[import-not-found]


class MasterMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.rpcs = Counter("mori_umbp_master_rpc_total", "RPCs served by the master", ["rpc"], registry=r)
        self.route_get = Counter("mori_umbp_route_get_total", "RouteGet lookups by result", ["result"], registry=r)
        self.route_put = Counter("mori_umbp_route_put_total", "RoutePut decisions by outcome", ["outcome"], registry=r)
        self.seq_gap = Counter("mori_umbp_heartbeat_seq_gap_total", "Heartbeat seq gaps (full sync asked)", registry=r)
        self.full_sync = Counter("mori_umbp_full_sync_total", "Full-sync heartbeats applied", registry=r)
        self.reaped = Counter("mori_umbp_nodes_reaped_total", "Nodes expired by the reaper", registry=r)
        self.evicted = Counter(
            "mori_umbp_evicted_blocks_total", "Blocks peers evicted at the master's request", registry=r
        )
        self.evicted_bytes = Counter("mori_umbp_evicted_bytes_total", "Bytes freed by master eviction", registry=r)
        self.nodes = Gauge("mori_umbp_nodes_alive", "Registered nodes", registry=r)
        labels = ["node", "tier"]
        self.cap_total = Gauge("mori_umbp_client_capacity_total_bytes", "Tier capacity", labels, registry=r)
        self.cap_avail = Gauge("mori_umbp_client_capacity_available_bytes", "Tier free bytes", labels, registry=r)
        self.cap_used = Gauge("mori_umbp_client_capacity_used_bytes", "Tier used bytes", labels, registry=r)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, kept: prometheus_client's ``labels`` validates and locks on
        every call, which was a quarter of the master's work per heartbeat."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def set_capacity(self, node: str, tier: str, total: int, avail: int) -> None:
        self.child(self.cap_total, node, tier).set(total)
        self.child(self.cap_avail, node, tier).set(avail)
        self.child(self.cap_used, node, tier).set(total - avail)

    def forget_node(self, node: str, tiers: list[str]) -> None:
        gauges = {id(g) for g in (self.cap_total, self.cap_avail, self.cap_used)}
        for key in [k for k in self._children if k[0] in gauges and k[1][0] == node]:
            del self._children[key]  # removed below: a kept child would no longer be exported
        for gauge in (self.cap_total, self.cap_avail, self.cap_used):
            for tier in tiers:
                with contextlib.suppress(KeyError):  # a tier this node never reported
                    gauge.remove(node, tier)
