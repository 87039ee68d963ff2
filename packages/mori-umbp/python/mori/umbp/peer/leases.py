# SPDX-License-Identifier: MIT
"""A peer's read leases: when each block's ends, and which run now, kept without a scan.

NOTE [running leases]: on-demand eviction skips leased blocks, and on the `lru` trace most of a
peer's blocks are leased at any moment (its whole pool turns over in less than a lease), so the
eviction scan used to ask "is this one leased?" of a Python object for nearly every block, on every
put: a quarter of a peer's interpreter time. A lease's end is its grant time plus one fixed
length, so leases end in the order they were granted: a queue in that order tells which ended, and
the set of running ones is kept up to date as they end, which the scan takes as one set.
"""

from __future__ import annotations

from collections import deque


class ReadLeases:
    """Not thread-safe: the owning store calls it under its own lock."""

    def __init__(self) -> None:
        self._ends: dict[str, float] = {}  # key -> when its latest lease ends
        self._running: set[str] = set()
        self._granted: deque[tuple[float, str]] = deque()  # (end, key), ends never decreasing

    def grant(self, key: str, now: float, length_s: float) -> None:
        """A lease on ``key`` until ``now + length_s`` (a running one is extended)."""
        self._expire(now)
        end = now + length_s
        self._ends[key] = end
        self._running.add(key)
        self._granted.append((end, key))

    def end(self, key: str) -> float:
        """When ``key``'s lease ends (0.0: none, or it has ended and been forgotten)."""
        return self._ends.get(key, 0.0)

    def drop(self, key: str) -> float:
        """Forgets ``key``'s lease (its block is gone); returns when it would have ended."""
        self._running.discard(key)
        return self._ends.pop(key, 0.0)

    def running(self, now: float) -> set[str]:
        """The keys whose lease runs past ``now``. The store's own set, valid until its next call."""
        self._expire(now)
        return self._running

    def _expire(self, now: float) -> None:
        granted = self._granted
        while granted and granted[0][0] <= now:
            _, key = granted.popleft()
            end = self._ends.get(key)
            if end is not None and end <= now:  # not extended since: this lease was its last
                del self._ends[key]
                self._running.discard(key)
