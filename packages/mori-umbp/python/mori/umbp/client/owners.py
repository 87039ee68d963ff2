# SPDX-License-Identifier: MIT
"""Where this client last found each key: NOTE [owner cache].

NOTE [owner cache]: a get of a key this client put or read before goes straight to that owner's
``BatchResolveKeys``, skipping the master's ``BatchRouteGet``. It is safe because the owner is
the authority: its resolve either finds the block and takes the read lease in one step, or
answers not found (evicted, cleared), and then the get asks the master, excluding that owner,
exactly as when a routed owner no longer holds a key; a failing owner is forgotten wholesale,
and the get goes to the master as if it had never been remembered: a miss if the master knows no
replica any more (the owner left), the routed path's error if it routes to that same owner (its
failure counts as that attempt, so a silent owner costs one deadline, not two).
The block's size comes from the owner's answer and is checked before any byte moves. What the
master no longer sees for these gets is the access (its timed LRU pass; the owner's on-demand
eviction sees it) and the routing lease (which only guards the gap between a route and the
resolve, and there is none here).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

#: Keys remembered; the least recently used are forgotten past it (about 200 bytes each).
CAPACITY = 1 << 16


@dataclass(frozen=True)
class Owner:
    node_id: str
    peer_address: str
    engine_desc: bytes


class OwnerCache:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._owners: OrderedDict[str, Owner] = OrderedDict()
        self._interned: dict[tuple[str, str, bytes], Owner] = {}

    def owner(self, node_id: str, peer_address: str, engine_desc: bytes) -> Owner:
        """One shared ``Owner`` per node, so remembering a key costs a reference."""
        ident = (node_id, peer_address, bytes(engine_desc))
        with self._lock:
            found = self._interned.get(ident)
            if found is None:
                found = self._interned[ident] = Owner(*ident)
            return found

    def get(self, key: str) -> Owner | None:
        with self._lock:
            return self._owners.get(key)

    def remember(self, key: str, owner: Owner) -> None:
        with self._lock:
            self._owners[key] = owner
            self._owners.move_to_end(key)
            while len(self._owners) > self.capacity:
                self._owners.popitem(last=False)

    def remember_many(self, keys: list[str], owner: Owner) -> None:
        """``remember`` of each of ``keys``, under one hold of the lock (a batch's keys)."""
        with self._lock:
            for key in keys:
                self._owners[key] = owner
                self._owners.move_to_end(key)
            while len(self._owners) > self.capacity:
                self._owners.popitem(last=False)

    def forget(self, key: str) -> None:
        with self._lock:
            self._owners.pop(key, None)

    def forget_node(self, node_id: str) -> None:
        """Drops every key of ``node_id`` (it failed: the master decides where to go next)."""
        with self._lock:
            for key in [k for k, o in self._owners.items() if o.node_id == node_id]:
                del self._owners[key]
            self._interned = {i: o for i, o in self._interned.items() if o.node_id != node_id}
