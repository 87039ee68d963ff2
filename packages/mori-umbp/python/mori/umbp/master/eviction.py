# SPDX-License-Identifier: MIT
"""Watermark LRU eviction of the HBM and DRAM tiers, driven by the master.

Every check interval, each (node, tier) above the high watermark gets LRU victims (leased keys
skipped) down to the low watermark, and the master asks the owning peer to free them from that
tier with ``EvictKey`` (keys plus their tier, MORI's wire). The owner demotes an HBM victim to
its DRAM when DRAM has room and drops it otherwise; a DRAM victim is dropped (its SSD copy, if
any, stays). The master changes none of its own state: the index follows the peer's REMOVE (and
ADD) events in its next heartbeat, so a peer that refuses (a reader holds a read lease) keeps the
block visible and consistent.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mori.umbp import rpc
from mori.umbp.auth import ClientAuth
from mori.umbp.errors import PeerUnavailableError
from mori.umbp.master.core import Master
from mori.umbp.master.policy import over_high_watermark, select_victims
from mori.umbp.types import PAGE_TIERS

log = logging.getLogger(__name__)


class Evictor:
    def __init__(self, master: Master, high: float, low: float, deadline_s: float) -> None:
        self.m = master
        self.high, self.low, self.deadline_s = high, low, deadline_s
        self._stubs: dict[str, tuple[Any, Any]] = {}
        self._auth: ClientAuth | None = None

    def set_auth(self, auth: ClientAuth) -> None:
        """How the master signs its EvictKey calls (it knows the secret only once it has bound)."""
        self._auth = auth

    def _stub(self, address: str) -> Any:
        if address not in self._stubs:
            assert self._auth is not None, "set_auth first"
            ch = rpc.channel(address, self._auth)
            self._stubs[address] = (ch, rpc.peer_grpc.UMBPPeerStub(ch))
        return self._stubs[address][1]

    def run_once(self) -> int:
        """One pass over every alive node; returns the bytes peers freed."""
        freed = 0
        now = time.time()
        for node in self.m.alive_nodes(now).values():
            # HBM, then DRAM: a deterministic pass (a demotion shows in DRAM's usage next heartbeat).
            for tier, (total, avail) in sorted(node.capacities.items()):
                # Under the high watermark there is nothing to select: the index is not scanned
                # (the scan holds the master's lock, which heartbeats and routing wait on).
                if tier not in PAGE_TIERS or not over_high_watermark(total, total - avail, self.high):
                    continue
                victims = select_victims(
                    self.m.store.candidates(node.node_id, tier), total, total - avail, self.high, self.low, now
                )
                if not victims:
                    continue
                req = rpc.peer_pb.EvictKeyRequest(keys=[v.key for v in victims], tiers=[tier] * len(victims))
                try:
                    res = rpc.call(
                        f"EvictKey to {node.node_id!r}",
                        self._stub(node.peer_address).EvictKey,
                        req,
                        PeerUnavailableError,
                        self.deadline_s,
                    )
                except PeerUnavailableError as exc:
                    log.warning("eviction on %r skipped: %s", node.node_id, exc)
                    continue
                done = [e for e in res.evicted if e.bytes_freed > 0]
                freed += sum(int(e.bytes_freed) for e in done)
                self.m.metrics.evicted.inc(len(done))
                self.m.metrics.evicted_bytes.inc(sum(int(e.bytes_freed) for e in done))
                log.info("node %r tier %d: evicted %d of %d LRU victims", node.node_id, tier, len(done), len(victims))
        return freed

    def close(self) -> None:
        for ch, _ in self._stubs.values():
            ch.close()
        self._stubs.clear()
