# SPDX-License-Identifier: MIT
"""Replays requests through a ``UMBPClient``: probe the prefix, read the hits, put the misses.

The client's KV buffer is host memory, or with ``device`` >= 0 a CUDA tensor registered with
mori-io (the HBM profile); block contents are made and checked in a host mirror of it, and the
copies between the two are outside the timed calls.
"""

from __future__ import annotations

import hashlib
import importlib
import time
from dataclasses import dataclass, field

import numpy as np

from mori.umbp.bench.api import StoreClient
from mori.umbp.client.base import UMBPClient

#: Keys per existence query when counting what the pool holds at the end.
_EXISTS_CHUNK = 1024


@dataclass
class Result:
    block_bytes: int
    requests: int = 0
    blocks: int = 0
    hit_blocks: int = 0
    put_failed: int = 0
    #: Blocks the prefix probe found that the get then missed (evicted in between).
    lost_after_probe: int = 0
    #: Distinct blocks of the trace still stored when the replay ends (the pool's occupancy).
    stored_at_end: int = 0
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


class SeededBlocks:
    """Each block generated from its key when it is needed (a SHA-256 and 64 KiB of a seeded
    generator per block put or checked: about a third of a trace's wall time on the bench machine)."""

    def __init__(self, block_bytes: int) -> None:
        self._ref = np.zeros(block_bytes, np.uint8)

    def fill(self, buf: np.ndarray, key: str) -> None:
        _fill(buf, key)

    def matches(self, buf: np.ndarray, key: str) -> bool:
        _fill(self._ref, key)
        return bool(np.array_equal(buf, self._ref))


class PreparedBlocks:
    """``--prepared-blocks``: every block of the trace prepared before the replay starts, as a
    window of one random buffer at an offset of its own (8 bytes apart per distinct key), so a
    put copies its block and a check compares against it: a copy and a compare per block instead
    of generating it, and blocks of different keys still differ (shifted random bytes)."""

    STRIDE = 8

    def __init__(self, keys: list[str], block_bytes: int, seed: int = 0) -> None:
        distinct = list(dict.fromkeys(keys))
        self._offset = {key: i * self.STRIDE for i, key in enumerate(distinct)}
        size = len(distinct) * self.STRIDE + block_bytes
        self._bytes = np.frombuffer(np.random.default_rng(seed).bytes(size), np.uint8)
        self._block = block_bytes

    def _of(self, key: str) -> np.ndarray:
        off = self._offset[key]
        return self._bytes[off : off + self._block]

    def fill(self, buf: np.ndarray, key: str) -> None:
        buf[:] = self._of(key)

    def matches(self, buf: np.ndarray, key: str) -> bool:
        return bool(np.array_equal(buf, self._of(key)))


class _DeviceMirror:
    """The CUDA tensor a GPU client reads into and writes from, mirrored by the host pool."""

    def __init__(self, host: np.ndarray, device: int) -> None:
        self.torch = importlib.import_module("torch")
        self.host = host
        self.tensor = self.torch.zeros(host.nbytes, dtype=self.torch.uint8, device=f"cuda:{device}")
        self.base = int(self.tensor.data_ptr())

    def upload(self, start: int, stop: int) -> None:
        self.tensor[start:stop].copy_(self.torch.from_numpy(self.host[start:stop]))
        self.torch.cuda.synchronize(self.tensor.device)

    def download(self, start: int, stop: int) -> None:
        self.torch.cuda.synchronize(self.tensor.device)
        self.host[start:stop] = self.tensor[start:stop].cpu().numpy()


def replay(
    client: StoreClient, requests: list[list[str]], block_bytes: int, device: int = -1, prepared: bool = False
) -> Result:
    """``prepared``: the blocks are made before the timed replay (PreparedBlocks), else each when
    it is needed (SeededBlocks); both check every byte read back."""
    res = Result(block_bytes)
    blocks: SeededBlocks | PreparedBlocks = (
        PreparedBlocks([k for keys in requests for k in keys], block_bytes) if prepared else SeededBlocks(block_bytes)
    )
    longest = max((len(r) for r in requests), default=0)
    pool = np.zeros(max(longest, 1) * block_bytes, np.uint8)
    mirror = _DeviceMirror(pool, device) if device >= 0 else None
    if mirror is not None:
        assert isinstance(client, UMBPClient), "the HBM profile is mori-umbp's"
        client.register_torch_tensor(mirror.tensor)
    else:
        client.register_memory(pool.ctypes.data, pool.nbytes)
    base = mirror.base if mirror is not None else int(pool.ctypes.data)
    start = time.perf_counter()
    for keys in requests:
        t0 = time.perf_counter()
        hits = client.batch_exists_consecutive(keys)
        ptrs = [base + i * block_bytes for i in range(len(keys))]
        if hits:
            t = time.perf_counter()
            got = client.batch_get_into_ptr(keys[:hits], ptrs[:hits], [block_bytes] * hits)
            res.get_s.append(time.perf_counter() - t)
            probed, hits = hits, 0
            while hits < len(got) and got[hits]:  # a block evicted since the probe ends the prefix
                hits += 1
            res.lost_after_probe += probed - hits
            if mirror is not None:
                mirror.download(0, hits * block_bytes)
            for i in range(hits):
                res.corrupt += int(not blocks.matches(pool[i * block_bytes : (i + 1) * block_bytes], keys[i]))
        misses = keys[hits:]
        if misses:
            for i, key in enumerate(misses, hits):
                blocks.fill(pool[i * block_bytes : (i + 1) * block_bytes], key)
            if mirror is not None:
                mirror.upload(hits * block_bytes, len(keys) * block_bytes)
            t = time.perf_counter()
            # Each block's depth is its place in the chain, for the prefix-aware eviction policy.
            depths = list(range(hits, len(keys)))
            ok = client.batch_put_from_ptr_with_depth(misses, ptrs[hits:], [block_bytes] * len(misses), depths)
            res.put_s.append(time.perf_counter() - t)
            res.put_failed += ok.count(False)
        res.request_s.append(time.perf_counter() - t0)
        res.requests += 1
        res.blocks += len(keys)
        res.hit_blocks += hits
        res.hits_per_request.append(hits)
    res.wall_s = time.perf_counter() - start
    client.deregister_memory(base)
    distinct = list(dict.fromkeys(k for keys in requests for k in keys))
    for i in range(0, len(distinct), _EXISTS_CHUNK):
        res.stored_at_end += sum(client.batch_exists(distinct[i : i + _EXISTS_CHUNK]))
    return res
