# SPDX-License-Identifier: MIT
"""The peer's KvEvent log: numbered bundles kept until the master acknowledges them.

See NOTE [index projection] in mori.umbp.master.core. Unacknowledged bundles are resent with
every heartbeat (the master skips those it applied), so a lost response loses nothing; a full
sync replaces them all with a snapshot taken under the same lock, so no event falls between.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

ADD, REMOVE = 0, 1
#: An ADD the master applies only if no other node holds the key (NOTE [direct put] in
#: mori.umbp.master.core); it travels as KvEvent ADD with if_absent set.
ADD_IF_ABSENT = 2
#: (kind, key, tier, size)
Event = tuple[int, str, int, int]


class EventLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[Event] = []
        self._unacked: list[tuple[int, list[Event]]] = []
        self._next_seq = 1

    def add(self, kind: int, key: str, tier: int, size: int) -> int:
        """Queues one event; returns how many are not yet in a bundle."""
        with self._lock:
            self._pending.append((kind, key, tier, size))
            return len(self._pending)

    def bundles(self) -> list[tuple[int, list[Event]]]:
        """Seals pending events into the next bundle; returns every unacknowledged bundle."""
        with self._lock:
            if self._pending:
                self._unacked.append((self._next_seq, self._pending))
                self._pending = []
                self._next_seq += 1
            return list(self._unacked)

    def ack(self, seq: int) -> None:
        with self._lock:
            self._unacked = [b for b in self._unacked if b[0] > seq]

    def last_sealed(self) -> int:
        with self._lock:
            return self._next_seq - 1

    def full_sync(self, snapshot: Callable[[], list[Event]]) -> tuple[int, list[Event]]:
        """(baseline seq, snapshot): ``snapshot`` runs under the log's lock, so every event
        before it is reflected in it and every event after it lands in a later bundle."""
        with self._lock:
            self._pending = []
            self._unacked = []
            return self._next_seq - 1, snapshot()

    def reset(self) -> None:
        """A fresh registration: the master expects seq 1 again."""
        with self._lock:
            self._next_seq = 1
            self._unacked = []
