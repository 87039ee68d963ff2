# SPDX-License-Identifier: MIT
"""A peer's pending slots answer "is this key held" and "how many slots does this node hold" from
indexes kept beside the slots (no scan per allocation). A random run of allocations, commits,
aborts, expiries and evictions on a real peer's store is checked, answer by answer, against a
plain list of the slots."""

from __future__ import annotations

import random

import pytest
from conftest import PAGE, make_client, master_config

from mori.umbp import MasterServer, UMBPTierType

DRAM = int(UMBPTierType.DRAM)
CAP = 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_slot_answers_match_a_plain_list_of_the_slots(seed):
    rng = random.Random(seed)
    with MasterServer(master_config()) as master, make_client(master.address, "owner", 64 * PAGE) as owner:
        store = owner.store
        store.max_pending_per_node = CAP
        slots: dict[int, tuple[str, str]] = {}  # the reference: slot id -> (key, node)
        stored: set[str] = set()
        keys, nodes = [f"k{i}" for i in range(8)], ["a", "b"]
        for _ in range(600):
            op = rng.choice(["allocate", "allocate", "commit", "abort", "expire", "evict"])
            if op == "allocate":
                key, node = rng.choice(keys), rng.choice(nodes)
                if key in stored:
                    want = "EXISTS"
                elif any(k == key for k, _ in slots.values()):
                    want = "PENDING"
                elif sum(1 for _, n in slots.values() if n == node) >= CAP:
                    want = "LIMIT"
                else:
                    want = "ALLOCATED"
                outcome, slot_id, _ = store.allocate(key, 100, DRAM, -1, node, 0.0)
                assert outcome == want, (op, key, node, slots)
                if outcome == "ALLOCATED":
                    slots[slot_id] = (key, node)
            elif op == "evict" and stored:
                key = rng.choice(sorted(stored))
                assert store.evict([key]) == [(key, PAGE)]
                stored.discard(key)
            elif slots and op != "evict":
                slot_id = rng.choice(sorted(slots))
                key, _ = slots.pop(slot_id)
                if op == "commit":
                    assert store.commit(slot_id, key) == ""
                    store.publish([key])  # as the master's acknowledgement would
                    stored.add(key)
                elif op == "abort":
                    store.abort(slot_id)
                else:
                    store._slots[slot_id].deadline = 0.0  # past its pending TTL
                    assert store.expire_slots() == 1
                assert store.commit(slot_id, key) != ""  # gone either way: a second commit is refused
        assert sorted(store.keys()) == sorted(stored)
