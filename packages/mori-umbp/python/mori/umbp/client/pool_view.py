# SPDX-License-Identifier: MIT
"""The pool as the master last described it, kept by a client to place its own puts.

NOTE [direct put] (the master's side in mori.umbp.master.core): the master's route costs a round
trip per put batch. A client that knows the alive nodes, their tiers' room and the master's
placement policy (a PoolView, which comes with its registration and every periodic heartbeat)
places a batch with the same ``policy.place_puts`` and sends it straight to the owners, whose
commits are ADD-if-absents at the master: a key stored elsewhere is refused there and answered
ALREADY_EXISTS, as the route would have. The view is charged for each placement, and an owner's
answer to BatchPutInline refreshes that owner's room. Keys an owner could not take (full, gone,
refused) go through the master's route as before, in the same call.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mori.umbp.master.policy import Capacities, place_puts


def _caps(capacities: Any) -> dict[int, tuple[int, int]]:
    return {int(c.tier): (int(c.total), int(c.available)) for c in capacities}


@dataclass(frozen=True)
class DirectRoute:
    """A placement made by the client: the fields of a RoutePutResponse the put path reads."""

    node_id: str
    tier: int
    peer_address: str
    engine_desc: bytes
    outcome: int  # rpc.pb.ROUTED


class PoolView:
    def __init__(self, node_id: str, routed: int) -> None:
        self.node_id = node_id
        self._routed = routed
        self._lock = threading.Lock()
        self._nodes: dict[str, tuple[str, bytes]] = {}  # node id -> (peer address, engine desc)
        self._caps: Capacities = {}
        self._algo, self._affinity = "most_available", "none"
        self._rng = random.Random()

    def __bool__(self) -> bool:
        return bool(self._nodes)

    def update(self, view: Any) -> None:
        """Replaces the view with a PoolView message from the master."""
        nodes = {n.node_id: (n.peer_address, bytes(n.engine_desc)) for n in view.nodes}
        caps = {n.node_id: _caps(n.tier_capacities) for n in view.nodes}
        with self._lock:
            self._nodes, self._caps = nodes, caps
            self._algo, self._affinity = view.put_algo or "most_available", view.put_affinity or "none"

    def refresh(self, node_id: str, capacities: Any) -> None:
        """The room an owner reported in its answer (TierCapacity messages)."""
        with self._lock:
            if node_id in self._caps and capacities:
                self._caps[node_id] = _caps(capacities)

    def address(self, node_id: str) -> str | None:
        """The peer address the view has for ``node_id`` (None: not in the view)."""
        with self._lock:
            entry = self._nodes.get(node_id)
            return entry[0] if entry is not None else None

    def forget(self, node_id: str) -> None:
        """An owner that failed a call: not placed on again until the master's next view."""
        with self._lock:
            self._nodes.pop(node_id, None)
            self._caps.pop(node_id, None)

    def place(self, sizes: Sequence[int | None]) -> list[DirectRoute | None]:
        """Per size, where the master's policy would put it over this view (None: skipped, or no
        node can take it); each placement is charged to the view."""
        with self._lock:
            picks = place_puts(sizes, self._caps, self._algo, self._affinity, self.node_id, self._rng)
            routes: dict[tuple[str, int], DirectRoute] = {}
            out: list[DirectRoute | None] = []
            for size, pick in zip(sizes, picks, strict=True):
                if pick is None or size is None:
                    out.append(None)
                    continue
                node, tier = pick
                total, avail = self._caps[node][tier]
                self._caps[node][tier] = (total, avail - size)
                if pick not in routes:
                    address, desc = self._nodes[node]
                    routes[pick] = DirectRoute(node, tier, address, desc, self._routed)
                out.append(routes[pick])
            return out
