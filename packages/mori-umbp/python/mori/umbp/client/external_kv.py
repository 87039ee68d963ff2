# SPDX-License-Identifier: MIT
"""MORI's external-KV result types, built from the master's answers. As MORI's, each constructs
with no arguments and its fields are writable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mori.umbp.types import UMBPTierType


@dataclass
class UMBPExternalKvNodeMatch:
    """The hashes one node holds, per tier (``UMBPMasterClient.match_external_kv``); one hash may
    sit in several tiers. ``hashes_by_tier`` iterates fastest tier first."""

    node_id: str = ""
    peer_address: str = ""
    hashes_by_tier: dict[UMBPTierType, list[str]] = field(default_factory=dict)

    def matched_hash_count(self) -> int:
        """Distinct hashes this node holds in any tier."""
        return len({h for hashes in self.hashes_by_tier.values() for h in hashes})

    @classmethod
    def from_pb(cls, m: Any) -> UMBPExternalKvNodeMatch:
        return cls(m.node_id, m.peer_address, {UMBPTierType(int(t.tier)): list(t.hashes) for t in m.hashes_by_tier})

    def __repr__(self) -> str:
        return f"<{type(self).__name__} node_id={self.node_id!r} matched={self.matched_hash_count()}>"


@dataclass(repr=False)
class UMBPExternalKvMatch(UMBPExternalKvNodeMatch):
    """The ``UMBPClient.match_external_kv`` flavour of the same record (MORI has both classes)."""

    @classmethod
    def of(cls, m: UMBPExternalKvNodeMatch) -> UMBPExternalKvMatch:
        return cls(m.node_id, m.peer_address, m.hashes_by_tier)


@dataclass
class UMBPExternalKvHitCountEntry:
    """A hash's lifetime hit count: matches with ``count_as_hit`` that found it."""

    hash: str = ""
    hit_count_total: int = 0

    def __repr__(self) -> str:
        return f"<UMBPExternalKvHitCountEntry hash={self.hash!r} hit_count_total={self.hit_count_total}>"
