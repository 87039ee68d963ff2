# SPDX-License-Identifier: MIT
"""The local mode (``UMBPClient`` without ``distributed``): its own DRAM and SSD tiers and its
own eviction, ``lru`` or ``prefix_aware_lru``, checked against an independent model (plain lists
scanned by hand) on random prefix-chain workloads, every byte read back compared with what was
put; and MORI's API semantics of the mode."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from mori.umbp import (
    ConfigError,
    InvalidArgumentError,
    LocalClient,
    UMBPClient,
    UMBPConfig,
    UMBPDeploymentMode,
    UMBPDramConfig,
    UMBPEvictionConfig,
    UMBPHbmConfig,
    UMBPSsdConfig,
    UMBPTierType,
)

PAGE = 4096
UNIT = 64  # the DRAM tier's extent alignment


class DramSpace:
    """The DRAM tier's bytes as per-page occupancy maps of UNIT-byte units, filled as its allocator
    is specified: a block takes ``size // PAGE`` wholly free pages (lowest first) and one run of
    the remainder's units, first fit in the lowest partly used page that has such a run, else in
    the lowest wholly free page the block does not take whole."""

    def __init__(self, pages: int) -> None:
        self.used_units = [[False] * (PAGE // UNIT) for _ in range(pages)]

    def place(self, size: int) -> list[tuple[int, int, int]] | None:
        full, rem = divmod(size, PAGE)
        need = -(-rem // UNIT)
        whole = [p for p, units in enumerate(self.used_units) if not any(units)]
        if full > len(whole):
            return None
        spots = [(p, 0, PAGE // UNIT) for p in whole[:full]]
        if need:
            spot = None
            for p, units in enumerate(self.used_units):
                if any(units) and not all(units):
                    start = next((i for i in range(len(units) - need + 1) if not any(units[i : i + need])), None)
                    if start is not None:
                        spot = (p, start, need)
                        break
            if spot is None and len(whole) > full:
                spot = (whole[full], 0, need)
            if spot is None:
                return None
            spots.append(spot)
        for p, start, n in spots:
            self.used_units[p][start : start + n] = [True] * n
        return spots

    def free(self, spots: list[tuple[int, int, int]]) -> None:
        for p, start, n in spots:
            self.used_units[p][start : start + n] = [False] * n


class TierModel:
    """One tier as a list, least recently used first: (key, depth, bytes charged[, DRAM spots])."""

    def __init__(self, capacity: int, high: int, low: int, policy: str, window: int) -> None:
        self.capacity, self.high, self.low = capacity, high, low
        self.policy, self.window = policy, window
        self.items: list[list] = []

    def used(self) -> int:
        return sum(it[2] for it in self.items)

    def find(self, key: str) -> list | None:
        return next((it for it in self.items if it[0] == key), None)

    def touch(self, key: str) -> None:
        item = self.find(key)
        self.items.remove(item)
        self.items.append(item)

    def victim(self, skip: frozenset[str] = frozenset()) -> list | None:
        tail = [it for it in self.items if it[0] not in skip]
        if self.policy == "lru":
            return tail[0] if tail else None
        tail = tail[: self.window]
        if not tail:
            return None
        deepest = max(it[1] for it in tail)
        return next(it for it in tail if it[1] == deepest)


class LocalModel:
    def __init__(self, dram_pages: int, ssd: tuple[int, float, float] | None, policy: str, window: int, promote: bool):
        cap = dram_pages * PAGE
        self.dram = TierModel(cap, int(0.8 * cap), int(0.5 * cap), policy, window)
        self.space = DramSpace(dram_pages)
        self.ssd = None
        if ssd is not None:
            scap, high, low = ssd
            self.ssd = TierModel(scap, int(high * scap), int(low * scap), policy, window)
        self.sizes: dict[str, int] = {}
        self.promote = promote

    def _ssd_put(self, key: str, depth: int) -> None:
        size = self.sizes[key]
        if self.ssd is None or size > self.ssd.capacity:
            return
        if self.ssd.find(key):
            self.ssd.touch(key)
            return
        while self.ssd.used() > self.ssd.capacity - size and (v := self.ssd.victim()):
            self.ssd.items.remove(v)
        self.ssd.items.append([key, depth, size])
        if self.ssd.used() > self.ssd.high:
            while self.ssd.used() > self.ssd.low and (v := self.ssd.victim(skip=frozenset({key}))):
                self.ssd.items.remove(v)

    def _demote(self, item: list) -> None:
        self.dram.items.remove(item)
        self.space.free(item[3])
        self._ssd_put(item[0], item[1])

    def _insert(self, key: str, depth: int, protect: frozenset[str] = frozenset()) -> bool:
        # Without SSD a batch never evicts its own blocks (they would be lost): ``protect``.
        skip = protect | {key} if self.ssd is None else frozenset({key})
        size = self.sizes[key]
        if size > self.dram.capacity:
            return False
        while (spots := self.space.place(size)) is None:
            victim = self.dram.victim(skip)
            if victim is None:
                return False
            self._demote(victim)
        self.dram.items.append([key, depth, sum(n for _, _, n in spots) * UNIT, spots])
        if self.dram.used() > self.dram.high:
            while self.dram.used() > self.dram.low and (v := self.dram.victim(skip)):
                self._demote(v)
        return True

    def holds(self, key: str) -> bool:
        return bool(self.dram.find(key) or (self.ssd and self.ssd.find(key)))

    def put_batch(self, entries: list[tuple[str, int, int]]) -> list[bool]:
        """(key, size, depth) per put; True only for blocks a get finds once the batch is done."""
        batch: set[str] = set()
        out = []
        for key, size, depth in entries:
            batch.add(key)
            if self.holds(key):
                out.append(True)
                continue
            self.sizes[key] = size
            out.append(self._insert(key, depth, frozenset(batch)))
            if not out[-1]:
                batch.discard(key)
        return [ok and self.holds(key) for (key, _, _), ok in zip(entries, out, strict=True)]

    def get(self, key: str) -> bool:
        if self.dram.find(key):
            self.dram.touch(key)
            return True
        item = self.ssd.find(key) if self.ssd else None
        if item is None:
            return False
        self.ssd.touch(key)
        if self.promote:
            self._insert(key, item[1])
        return True

    def tiers(self) -> dict[str, list[str]]:
        ssd = sorted(it[0] for it in self.ssd.items) if self.ssd else []
        return {"DRAM": sorted(it[0] for it in self.dram.items), "SSD": ssd}


def value(key: str, size: int) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(key.encode())).integers(0, 256, size, dtype=np.uint8)


def local_client(tmp_path, dram_pages: int, ssd: tuple[int, float, float] | None, policy: str, window: int, promote):
    ssd_config = UMBPSsdConfig(False)
    if ssd is not None:
        ssd_config = UMBPSsdConfig(True, str(tmp_path / "ssd"), ssd[0], ssd[1], ssd[2])
    return UMBPClient(
        UMBPConfig(
            dram=UMBPDramConfig(dram_pages * PAGE, PAGE, 0.8, 0.5),
            ssd=ssd_config,
            eviction=UMBPEvictionConfig(policy, window, promote),
        )
    )


@pytest.mark.parametrize(
    ("policy", "window", "ssd", "promote"),
    [
        ("prefix_aware_lru", 16, (20 * PAGE, 0.9, 0.6), True),
        ("prefix_aware_lru", 3, (20 * PAGE, 0.9, 0.6), False),
        ("lru", 16, (20 * PAGE, 0.9, 0.6), True),
        ("prefix_aware_lru", 4, None, False),
    ],
)
def test_tiers_and_eviction_match_the_model(tmp_path, policy, window, ssd, promote):
    rng = random.Random(f"{policy}{window}{promote}")
    client = local_client(tmp_path, 12, ssd, policy, window, promote)
    model = LocalModel(12, ssd, policy, window, promote)
    chains = [[f"s{s}-d{d}" for d in range(8)] for s in range(6)]
    sizes = {k: rng.choice([PAGE, PAGE, PAGE + 123, 2 * PAGE, 700]) for c in chains for k in c}
    with client:
        assert isinstance(client, LocalClient)
        for step in range(400):
            chain = rng.choice(chains)
            if rng.random() < 0.5:  # a prompt: probe the prefix, read the hits, put the rest
                n = rng.randint(1, len(chain))
                keys = chain[:n]
                want_hits = 0
                while want_hits < n and (
                    model.dram.find(keys[want_hits]) or (model.ssd and model.ssd.find(keys[want_hits]))
                ):
                    want_hits += 1
                assert client.batch_exists_consecutive(keys) == want_hits, step
                bufs = [value(k, sizes[k]) for k in keys[want_hits:]]
                depths = list(range(want_hits, n))
                ptrs = [b.ctypes.data for b in bufs]
                got = client.batch_put_from_ptr_with_depth(keys[want_hits:], ptrs, [b.nbytes for b in bufs], depths)
                assert got == model.put_batch([(k, sizes[k], d) for k, d in zip(keys[want_hits:], depths, strict=True)])
            else:  # a read of one block
                key = rng.choice(chain)
                out = np.zeros(sizes[key], np.uint8)
                hit = model.get(key)
                assert client.get_into_ptr(key, out.ctypes.data, out.nbytes) == hit, (step, key)
                if hit:
                    assert np.array_equal(out, value(key, sizes[key])), (step, key)
            assert client.keys_by_tier() == model.tiers(), step


def test_prefix_aware_drops_a_chains_tail_first_lru_its_head(tmp_path):
    survivors = {}
    for policy in ("prefix_aware_lru", "lru"):
        with local_client(tmp_path / policy, 4, None, policy, 16, False) as c:
            data = value("x", PAGE)
            for d in range(5):  # one chain, depths 0..4, a put each: four pages hold four blocks
                assert c.batch_put_from_ptr_with_depth([f"a{d}"], [data.ctypes.data], [PAGE], [d]) == [True]
            survivors[policy] = c.keys_by_tier()["DRAM"]
    # a3 fills the 4th page (> 0.8): two blocks go (down to 0.5), a3 itself spared; a4 follows.
    # prefix_aware_lru drops a2 then a1 (deepest first) and keeps the head a0; lru drops a0, a1.
    assert survivors["prefix_aware_lru"] == ["a0", "a3", "a4"]
    assert survivors["lru"] == ["a2", "a3", "a4"]


def test_api_of_the_local_mode(tmp_path):
    config = UMBPConfig(UMBPDramConfig(8 * PAGE, PAGE), ssd=UMBPSsdConfig(True, str(tmp_path), 8 * PAGE))
    with UMBPClient(config) as c:
        assert (c.is_distributed(), c.get_deployment_mode()) == (False, UMBPDeploymentMode.Local)
        first, second = value("a", PAGE), value("b", PAGE)
        assert c.register_memory(first.ctypes.data, first.nbytes)  # accepted; copies need no pinning
        assert c.put_from_ptr("k", first.ctypes.data, PAGE)
        assert c.put_from_ptr("k", second.ctypes.data, PAGE)  # first writer wins
        out = np.zeros(PAGE, np.uint8)
        assert c.get_into_ptr("k", out.ctypes.data, PAGE) and np.array_equal(out, first)
        with pytest.raises(InvalidArgumentError, match="size=100 but block 'k' holds 4096 bytes"):
            c.get_into_ptr("k", out.ctypes.data, 100)
        assert c.batch_exists(["k", "nope"]) == [True, False]
        assert c.report_external_kv_blocks(["h"], UMBPTierType.DRAM) is False  # no master to tell
        assert c.match_external_kv(["h"]) == [] and c.get_external_kv_hit_counts(["h"]) == []
        assert c.flush() and c.clear() and c.batch_exists(["k"]) == [False]
        too_big = np.zeros(9 * PAGE, np.uint8)
        assert c.put_from_ptr("big", too_big.ctypes.data, too_big.nbytes) is False  # larger than DRAM


def test_ssd_blocks_survive_a_restart_of_the_local_client(tmp_path):
    config = UMBPConfig(
        UMBPDramConfig(2 * PAGE, PAGE, 0.9, 0.5),
        ssd=UMBPSsdConfig(True, str(tmp_path), 16 * PAGE),
        eviction=UMBPEvictionConfig(auto_promote_on_read=False),
    )
    data = {f"r{i}": value(f"r{i}", PAGE) for i in range(6)}
    with UMBPClient(config) as c:
        for key, v in data.items():
            assert c.put_from_ptr(key, v.ctypes.data, PAGE)
        on_ssd = c.keys_by_tier()["SSD"]
    assert on_ssd == ["r0", "r1", "r2", "r3", "r4"]  # the DRAM ones are lost with the process
    with UMBPClient(config) as again:
        assert again.keys_by_tier() == {"DRAM": [], "SSD": on_ssd}
        for key in on_ssd:
            out = np.zeros(PAGE, np.uint8)
            assert again.get_into_ptr(key, out.ctypes.data, PAGE) and np.array_equal(out, data[key])


def test_local_config_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"hbm.capacity_bytes=4096: the local mode has DRAM and SSD tiers only"):
        UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE), hbm=UMBPHbmConfig(PAGE)))
    with pytest.raises(ConfigError, match=r"dram.capacity_bytes=0 must hold at least one page"):
        UMBPClient(UMBPConfig(UMBPDramConfig(0, PAGE)))
    with pytest.raises(ConfigError, match=r"dram watermarks low=0.9, high=0.5"):
        UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE, 0.5, 0.9)))
    with pytest.raises(ConfigError, match=r"policy='mru'"):
        UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE), eviction=UMBPEvictionConfig("mru")))
    monkeypatch.setenv("UMBP_DRAM_CAPACITY", "64K")
    monkeypatch.setenv("UMBP_DRAM_PAGE_SIZE", "4K")
    monkeypatch.setenv("UMBP_EVICTION_POLICY", "prefix_aware_lru")
    config = UMBPConfig.from_environment(distributed=False)
    with UMBPClient(config) as c:
        assert isinstance(c, LocalClient) and c.config.eviction.policy == "prefix_aware_lru"
        assert c.config.dram.capacity_bytes == 64 << 10
