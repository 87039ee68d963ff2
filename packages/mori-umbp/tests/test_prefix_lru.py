# SPDX-License-Identifier: MIT
"""``prefix_aware_lru``: among the LRU tail's candidate window, the deepest block of a chain goes
first, so a prefix loses its tail before its head. Checked against an independent model (a plain
list scanned by hand), and end to end through ``batch_put_from_ptr_with_depth``."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import PAGE, make_client, master_config

from mori.umbp import InvalidArgumentError, MasterServer, UMBPSsdConfig
from mori.umbp.peer.lru import EvictionOrder


class Model:
    """The policy restated as directly as possible: a list, oldest first."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.items: list[tuple[str, int]] = []

    def add(self, key: str, depth: int) -> None:
        old = [d for k, d in self.items if k == key]
        self.items = [(k, d) for k, d in self.items if k != key] + [(key, max([depth, *old]))]

    def touch(self, key: str) -> None:
        for i, (k, _) in enumerate(self.items):
            if k == key:
                self.items.append(self.items.pop(i))
                return

    def evict(self) -> str:
        tail = self.items[: self.window]
        deepest = max(d for _, d in tail)
        key = next(k for k, d in tail if d == deepest)
        self.items = [(k, d) for k, d in self.items if k != key]
        return key


@pytest.mark.parametrize("window", [1, 3, 16])
def test_matches_the_model_on_random_prefix_workloads(window):
    rng = random.Random(window)
    order, model = EvictionOrder("prefix_aware_lru", window), Model(window)
    for step in range(3000):
        op = rng.random()
        if op < 0.6 or not model.items:
            seq, depth = rng.randrange(12), rng.randrange(-1, 8)
            key = f"seq{seq}_{depth}"
            order.add(key, depth)
            model.add(key, depth)
        elif op < 0.8:
            key = rng.choice(model.items)[0]
            order.touch(key)
            model.touch(key)
        else:
            want = model.evict()
            got = order.victim()
            assert got == want, f"step {step}"
            order.remove(got)
        assert len(order) == len(model.items)


def test_a_prefix_loses_its_tail_first_and_plain_lru_its_head():
    chain = [("a0", 0), ("a1", 1), ("a2", 2), ("b0", 0), ("b1", 1)]
    aware, lru = EvictionOrder("prefix_aware_lru"), EvictionOrder("lru")
    for key, depth in chain:
        aware.add(key, depth)
        lru.add(key, depth)
    assert aware.victim() == "a2" and lru.victim() == "a0"
    assert aware.victim(skip=frozenset({"a2"})) == "a1"  # a2 is busy: the next deepest


def _ssd_chain_survivors(tmp_path, policy: str) -> list[str]:
    ssd = UMBPSsdConfig(True, str(tmp_path / policy), 6 * PAGE, high_watermark=1.0, low_watermark=0.5)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "owner", 16 * PAGE, ssd=ssd, policy=policy) as owner,
        make_client(master.address, "writer") as w,
    ):
        values = np.random.default_rng(2).integers(0, 256, (7, PAGE), dtype=np.uint8)
        ptrs = [int(values[i].ctypes.data) for i in range(7)]
        # Two prompts: a0..a3 (depths 0..3), then b0..b2; the remote owner gets the depths over gRPC.
        # a is put a block per call, head first, so a0 is the oldest (within one batch the head
        # would be the newest, NOTE [chain order], and plain LRU would drop a3 as well).
        for i in range(4):
            assert w.batch_put_from_ptr_with_depth([f"a{i}"], ptrs[i : i + 1], [PAGE], [i]) == [True]
        assert owner.store.drain_spills(10)
        assert w.batch_put_from_ptr_with_depth(["b0", "b1", "b2"], ptrs[4:], [PAGE] * 3, [0, 1, 2])
        assert owner.store.drain_spills(10)
        with pytest.raises(InvalidArgumentError, match=r"depths\[0\]=-2 must be an int in \[-1, 2\*\*31\)"):
            w.batch_put_from_ptr_with_depth(["c0"], ptrs[:1], [PAGE], [-2])
        return sorted(owner.store.ssd_keys())


def test_ssd_tier_evicts_by_depth_end_to_end(tmp_path):
    # Seven blocks, six fit: prefix-aware drops a3 (the deepest), plain LRU drops a0 (the oldest).
    assert _ssd_chain_survivors(tmp_path, "prefix_aware_lru") == ["a0", "a1", "a2", "b0", "b1", "b2"]
    assert _ssd_chain_survivors(tmp_path, "lru") == ["a1", "a2", "a3", "b0", "b1", "b2"]
