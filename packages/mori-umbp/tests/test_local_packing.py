# SPDX-License-Identifier: MIT
"""The local DRAM tier packs small blocks within its pages: a tier of ``capacity`` bytes holds
``capacity // footprint`` of them (footprint: the size rounded up to 64 bytes), counted here from
the arithmetic, not from the allocator. A batch larger than the tier never answers True for a
block that a get then misses; freed extents are reused."""

from __future__ import annotations

import numpy as np
import pytest

from mori.umbp import UMBPClient, UMBPConfig, UMBPDramConfig, UMBPEvictionConfig, UMBPSsdConfig
from mori.umbp.peer.packed import PackedAllocator

MiB = 1 << 20


def values(n: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size), dtype=np.uint8)


def footprint(size: int, page: int) -> int:
    return (size // page) * page + -(-(size % page) // 64) * 64


def put_then_get(client, keys: list[str], data: np.ndarray) -> tuple[list[bool], list[bool]]:
    size = data.shape[1]
    put = client.batch_put_from_ptr(keys, [int(row.ctypes.data) for row in data], [size] * len(keys))
    out = np.zeros_like(data)
    got = client.batch_get_into_ptr(keys, [int(row.ctypes.data) for row in out], [size] * len(keys))
    for i, ok in enumerate(got):
        if ok:
            assert np.array_equal(out[i], data[i]), keys[i]
    return put, got


@pytest.mark.parametrize("size", [4096, 1000, 64])
def test_a_small_tier_holds_capacity_over_size_blocks_and_never_lies_about_a_batch(size):
    capacity, page = 4 * MiB, 2 * MiB  # two pages: whole pages per block held 2 blocks
    reference = (capacity // page) * (page // footprint(size, page))
    n = reference + 37
    data = values(n, size, size)
    keys = [f"k{size}-{i}" for i in range(n)]
    with UMBPClient(UMBPConfig(UMBPDramConfig(capacity, page))) as client:
        put, got = put_then_get(client, keys, data)
        assert sum(put) == reference
        assert put == got  # a True put is a hit, a False one a miss: nothing evicted within the batch
        assert put == [True] * reference + [False] * 37  # first come, first placed
        assert client.batch_exists(keys) == put

        # A later batch evicts the earlier one's blocks (LRU across batches) and reuses their bytes.
        later = values(10, size, size + 1)
        put2, got2 = put_then_get(client, [f"new{size}-{i}" for i in range(10)], later)
        assert put2 == got2 == [True] * 10
        evicted = n - sum(client.batch_exists(keys))
        assert evicted >= 10 + 37

        assert client.clear()
        put3, got3 = put_then_get(client, keys, data)  # every extent was freed: the tier is whole again
        assert sum(put3) == reference and put3 == got3


def test_a_batch_spilling_to_a_small_ssd_answers_true_only_for_readable_blocks(tmp_path):
    size, page = 16 << 10, 64 << 10
    dram, ssd = 4 * page, 6 * size  # DRAM holds 16 blocks, SSD 6
    # No promotion on read: a get of an SSD block would otherwise evict others within the get batch.
    config = UMBPConfig(
        UMBPDramConfig(dram, page),
        ssd=UMBPSsdConfig(True, str(tmp_path), ssd),
        eviction=UMBPEvictionConfig(auto_promote_on_read=False),
    )
    n = 40
    data = values(n, size, 5)
    keys = [f"s{i}" for i in range(n)]
    with UMBPClient(config) as client:
        put = client.batch_put_from_ptr(keys, [int(r.ctypes.data) for r in data], [size] * n)
        assert client.batch_exists(keys) == put
        out = np.zeros_like(data)
        got = client.batch_get_into_ptr(keys, [int(r.ctypes.data) for r in out], [size] * n)
        assert put == got
        assert all(np.array_equal(out[i], data[i]) for i in range(n) if got[i])
        assert 16 <= sum(put) <= 16 + 6


def test_blocks_larger_than_a_page_take_whole_pages_plus_a_packed_tail():
    page = 64 << 10
    alloc = PackedAllocator(4 * page, page)
    big = alloc.alloc(page + 100)  # one whole page and a 128-byte tail in another page
    assert big is not None and [length for _, length in big] == [page, 128]
    assert alloc.available == 4 * page - page - 128
    small = [alloc.alloc(4096) for _ in range(15)]  # fill the tail page's rest first
    tail_page = big[1][0] // page
    assert all(s is not None and s[0][0] // page == tail_page for s in small)
    assert alloc.alloc(3 * page) is None  # two wholly free pages left: nothing taken
    assert alloc.available == 4 * page - page - 128 - 15 * 4096
    alloc.free(big)
    for s in small:
        assert s is not None
        alloc.free(s)
    assert alloc.available == 4 * page and alloc.alloc(4 * page) is not None
