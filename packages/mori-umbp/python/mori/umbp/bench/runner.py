# SPDX-License-Identifier: MIT
"""Replays requests through a ``UMBPClient``: probe the prefix, read the hits, put the misses."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from mori.umbp.client.pool_client import UMBPClient


@dataclass
class Result:
    block_bytes: int
    requests: int = 0
    blocks: int = 0
    hit_blocks: int = 0
    put_failed: int = 0
    hits_per_request: list[int] = field(default_factory=list)
    request_s: list[float] = field(default_factory=list)
    get_s: list[float] = field(default_factory=list)
    put_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    corrupt: int = 0


def _fill(buf: np.ndarray, key: str) -> None:
    # Each block's bytes derive from its key, so every read is checked without keeping copies.
    seed = int(hashlib.sha256(key.encode()).hexdigest()[:16], 16)
    buf[:] = np.frombuffer(np.random.default_rng(seed).bytes(buf.nbytes), np.uint8)


def replay(client: UMBPClient, requests: list[list[str]], block_bytes: int) -> Result:
    res = Result(block_bytes)
    longest = max((len(r) for r in requests), default=0)
    pool = np.zeros(max(longest, 1) * block_bytes, np.uint8)
    client.register_memory(pool.ctypes.data, pool.nbytes)
    ref = np.zeros(block_bytes, np.uint8)
    start = time.perf_counter()
    for keys in requests:
        t0 = time.perf_counter()
        hits = client.batch_exists_consecutive(keys)
        ptrs = [pool.ctypes.data + i * block_bytes for i in range(len(keys))]
        if hits:
            t = time.perf_counter()
            got = client.batch_get_into_ptr(keys[:hits], ptrs[:hits], [block_bytes] * hits)
            res.get_s.append(time.perf_counter() - t)
            hits = 0
            while hits < len(got) and got[hits]:  # a block evicted since the probe ends the prefix
                hits += 1
            for i in range(hits):
                _fill(ref, keys[i])
                res.corrupt += int(not np.array_equal(pool[i * block_bytes : (i + 1) * block_bytes], ref))
        misses = keys[hits:]
        if misses:
            for i, key in enumerate(misses, hits):
                _fill(pool[i * block_bytes : (i + 1) * block_bytes], key)
            t = time.perf_counter()
            ok = client.batch_put_from_ptr(misses, ptrs[hits:], [block_bytes] * len(misses))
            res.put_s.append(time.perf_counter() - t)
            res.put_failed += ok.count(False)
        res.request_s.append(time.perf_counter() - t0)
        res.requests += 1
        res.blocks += len(keys)
        res.hit_blocks += hits
        res.hits_per_request.append(hits)
    res.wall_s = time.perf_counter() - start
    client.deregister_memory(pool.ctypes.data)
    return res
