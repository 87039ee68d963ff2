# SPDX-License-Identifier: MIT
"""Local eviction order: plain LRU, MORI's ``prefix_aware_lru``, or ``segmented_lru``.

A prompt's blocks form a chain (a radix-tree path): block ``d`` is useful only while blocks
0..d-1 are, because a lookup stops at the first miss (``batch_exists_consecutive``). Evicting the
head of a chain strands its tail, so ``prefix_aware_lru`` looks at the ``window`` least recently
used blocks and drops the deepest one first (ties: the older one). A depth of -1 means "unknown"
and ranks below every known depth, so such blocks go in plain LRU order after tracked tails.

NOTE [segmented LRU] (mori-umbp's own; MORI has the other two): a block enters a probation
segment when it is put and moves to a protected segment when it is read; past PROTECTED_SHARE of
the tier's blocks, the protected segment's least recently used block falls back to probation as
its most recently used. Victims come from probation first, each segment in LRU order. So a
burst of blocks put and never read (the turns of sessions that do not come back) passes through
probation without pushing out the blocks that are read again. On the bench's synthetic trace the
bench's own model gives a hit rate of 0.707 against plain LRU's 0.633 (docs/benchmarks/umbp.md,
seventh round).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Container, Iterator

from mori.umbp.errors import ConfigError

POLICIES = ("lru", "prefix_aware_lru", "segmented_lru")
#: MORI's eviction.candidate_window.
CANDIDATE_WINDOW = 16
#: NOTE [segmented LRU]: the protected segment's most, as a share of the tier's blocks.
PROTECTED_SHARE = 0.8


class EvictionOrder:
    """Keys in least-recently-used-first order, each with its chain depth. Not thread-safe: the
    owner (a tier) calls it under its own lock."""

    def __init__(self, policy: str = "lru", window: int = CANDIDATE_WINDOW) -> None:
        if policy not in POLICIES:
            raise ConfigError(f"eviction policy={policy!r} is not one of {', '.join(POLICIES)}")
        if window < 1:
            raise ConfigError(f"candidate window={window} must be >= 1")
        self.policy = policy
        self.window = window
        # Keys and depths, least recently used first: every key under lru and prefix_aware_lru,
        # the probation segment under segmented_lru, whose protected segment is _protected.
        self._order: OrderedDict[str, int] = OrderedDict()
        self._protected: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order) + len(self._protected)

    def __contains__(self, key: object) -> bool:
        return key in self._order or key in self._protected

    def add(self, key: str, depth: int = -1) -> None:
        """Inserts ``key`` as the most recently used (re-adding keeps the deeper known depth and,
        under segmented_lru, the key's segment)."""
        if key in self._protected:
            self._protected[key] = max(self._protected.pop(key), depth)
            return
        old = self._order.pop(key, -1)
        self._order[key] = max(old, depth)

    def add_oldest(self, key: str, depth: int = -1) -> None:
        """Inserts ``key`` as the least recently used (a block demoted from a faster tier)."""
        depth = max(self.depth(key), depth)
        self.remove(key)
        self._order[key] = depth
        self._order.move_to_end(key, last=False)

    def clear(self) -> None:
        self._order.clear()
        self._protected.clear()

    def depth(self, key: str) -> int:
        """The chain depth recorded for ``key`` (-1: unknown or absent)."""
        return self._order.get(key, self._protected.get(key, -1))

    def touch(self, key: str) -> None:
        if key in self._protected:
            self._protected.move_to_end(key)
        elif key in self._order:
            if self.policy != "segmented_lru":
                self._order.move_to_end(key)
                return
            self._protected[key] = self._order.pop(key)  # NOTE [segmented LRU]: read, so protected
            limit = int(PROTECTED_SHARE * len(self))
            while len(self._protected) > limit:
                old, depth = self._protected.popitem(last=False)
                self._order[old] = depth

    def remove(self, key: str) -> None:
        if self._order.pop(key, None) is None:
            self._protected.pop(key, None)

    def _items(self) -> Iterator[tuple[str, int]]:
        """Every key and depth in eviction order (probation first under segmented_lru)."""
        return itertools.chain(self._order.items(), self._protected.items())

    def victim(self, skip: Container[str] = frozenset()) -> str | None:
        """The next key to evict, ignoring ``skip``; None when nothing is evictable."""
        best: str | None = None
        best_depth = -2
        seen = 0
        for key, depth in self._items():
            if key in skip:
                continue
            if self.policy != "prefix_aware_lru":
                return key
            if depth > best_depth:  # strict: on a tie the older (earlier) key stays chosen
                best, best_depth = key, depth
            seen += 1
            if seen >= self.window:
                break
        return best

    def victims(self, skip: Container[str] = frozenset()) -> Iterator[str]:
        """The keys ``victim`` would name one after another if each were evicted before the next
        call, in one pass over the order (NOTE [batch eviction] in mori.umbp.peer.store). The
        order must not change while the caller iterates (it holds the owner's lock)."""
        # NOTE [running leases] in mori.umbp.peer.leases: the skipping runs in C (most of a full
        # peer's blocks may be busy).
        keys = itertools.filterfalse(skip.__contains__, itertools.chain(self._order, self._protected))
        if self.policy != "prefix_aware_lru":
            yield from keys
            return
        window: list[tuple[str, int]] = []
        for key in keys:
            window.append((key, self._order[key]))  # prefix_aware_lru keeps no protected segment
            if len(window) < self.window:
                continue
            yield self._take_deepest(window)
        while window:
            yield self._take_deepest(window)

    @staticmethod
    def _take_deepest(window: list[tuple[str, int]]) -> str:
        """Removes and returns the deepest key of ``window`` (on a tie the earlier, older one)."""
        best = 0
        for i in range(1, len(window)):
            if window[i][1] > window[best][1]:
                best = i
        return window.pop(best)[0]
