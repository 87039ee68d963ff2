# SPDX-License-Identifier: MIT
"""SGLang's HiCache storage backend for MORI UMBP, replayed against mori-umbp.

The client: sgl-project/sglang, python/sglang/srt/mem_cache/storage/umbp/umbp_store.py
(``UMBPStore(HiCacheStorage)``) at revision cd7c499709490beb119dad17719a42f0b064eb5a (38 KB; it
targets MORI's older config: ``UMBPIoBackend.PThread``, top-level ``cfg.ssd_backend = "posix"`` and
``cfg.spdk_*``). Its later revision 080d033c3227024f0fcc695672d3ab5ad163981a moved those under
``cfg.ssd`` (``ssd_backend = "file"``, ``UMBPIoBackend.Posix``) and adds ``master_config.tags`` and
``get_deployment_mode()``; ``test_the_later_revisions_spelling`` covers those differences.

``StoreReplay`` makes the calls UMBPStore makes, with the same arguments, types and order: the names
it takes from ``mori.umbp`` (``getattr`` for the optional ones), ``UMBPConfig.from_environment()``,
``cfg.role = UMBPRole.Standalone``, the extra_config fields in the client's order, the distributed
config (SGLang's default node id ``<address>:dp0:pp0:tp<rank>``, ``io_engine.host`` = the node
address, ``dram_page_size`` = one page's bytes), the MLA + TP>1 shared-SSD roles, the per-rank SSD
directory, ``UMBPClient(cfg)``, ``is_distributed()`` + ``register_memory(ptr, size)`` of the whole
host KV buffer; then batch_set_v1 (``batch_put_from_ptr`` / ``_with_depth`` of ``<hash>_<rank>_k``
and ``_v`` keys), batch_get_v1 (``batch_get_into_ptr``), batch_exists
(``batch_exists_consecutive`` // 2), the legacy get / set / batch_get / batch_set / exists,
clear, flush, and close (a flush, then the client dropped without ``close()``). The host KV
pool is a numpy buffer in SGLang's page_first layout; pointers are ``.ctypes.data`` ints. Bytes
read back are compared with a numpy reference copy, exists answers with a set of the keys the test
stored. CPU only, loopback, bounded.
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from conftest import master_config, wait_for

from mori._compat import noted_settings
from mori.umbp import ConfigError, MasterServer

PAGE_TOKENS = 4
LAYERS, HEADS, HEAD_DIM = 4, 2, 64  # fp16: one page's K is 4*4*2*64*2 = 4096 bytes
MLA_DIM = 512  # fp16 latent: one MLA page is 4*4*512*2 = 16 KiB
PAGES = 12


def prefix_hashes(n: int, seed: int) -> list[str]:
    """SGLang's page keys: 64-hex SHA-256 hashes, each chained on the previous one."""
    out, prev = [], b""
    for i in range(n):
        prev = hashlib.sha256(prev + f"{seed}:{i}".encode()).digest()
        out.append(prev.hex())
    return out


class HostKV:
    """A host KV pool in SGLang's page_first layout (kv_buffer[0] K, kv_buffer[1] V; MLA: one
    latent buffer), with get_page_buffer_meta's answer: a pointer and a size per key part."""

    def __init__(self, pages: int, mla: bool, seed: int) -> None:
        rng = np.random.default_rng(seed)
        shape = (pages * PAGE_TOKENS, LAYERS, 1, MLA_DIM) if mla else (2, pages * PAGE_TOKENS, LAYERS, HEADS, HEAD_DIM)
        self.mla = mla
        self.kv_buffer = rng.standard_normal(shape).astype(np.float16)
        self.page_size = PAGE_TOKENS

    def page_bytes(self) -> int:
        per_token = self.kv_buffer[0].nbytes if self.mla else self.kv_buffer[0, 0].nbytes
        return int(per_token * PAGE_TOKENS)

    def get_page_buffer_meta(self, indices: np.ndarray) -> tuple[list[int], list[int]]:
        base, ptrs = self.kv_buffer.ctypes.data, []
        for first in indices[:: self.page_size]:
            if self.mla:
                ptrs.append(int(base + int(first) * self.kv_buffer[0].nbytes))
            else:
                token = self.kv_buffer[0, 0].nbytes
                ptrs.append(int(base + int(first) * token))
                ptrs.append(int(base + self.kv_buffer[0].nbytes + int(first) * token))
        return ptrs, [self.page_bytes()] * len(ptrs)

    def page(self, index: int) -> np.ndarray:
        rows = slice(index * PAGE_TOKENS, (index + 1) * PAGE_TOKENS)
        return self.kv_buffer[rows].copy() if self.mla else self.kv_buffer[:, rows].copy()

    def part_bytes(self, index: int, part: int) -> bytes:
        """The bytes of one key part of page ``index`` (MHA: 0 K, 1 V)."""
        rows = slice(index * PAGE_TOKENS, (index + 1) * PAGE_TOKENS)
        return self.kv_buffer[rows].tobytes() if self.mla else self.kv_buffer[part, rows].tobytes()

    def zero(self, pages: list[int]) -> None:
        for index in pages:
            rows = slice(index * PAGE_TOKENS, (index + 1) * PAGE_TOKENS)
            if self.mla:
                self.kv_buffer[rows] = 0
            else:
                self.kv_buffer[:, rows] = 0

    def indices(self, pages: list[int]) -> np.ndarray:
        return np.concatenate([np.arange(p * PAGE_TOKENS, (p + 1) * PAGE_TOKENS) for p in pages]).astype(np.int64)


def _io_backend(value: Any) -> Any:
    members = importlib.import_module("mori.umbp").UMBPIoBackend
    return {
        "pthread": members.PThread,
        "posix": members.PThread,
        "io_uring": members.IoUring,
        "uring": members.IoUring,
    }.get(str(value).lower())


def _durability_mode(value: Any) -> Any:
    members = importlib.import_module("mori.umbp").UMBPDurabilityMode
    return {"strict": members.Strict, "sync": members.Strict, "relaxed": members.Relaxed, "async": members.Relaxed}.get(
        str(value).lower()
    )


#: UMBPStore's extra_config fields, in its order: (key, the attribute path under the config, the
#: conversion it applies; None from it leaves the field as it is, as UMBPStore does for a spelling
#: of an enum it does not know).
_EXTRA_FIELDS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("dram_capacity_bytes", "dram.capacity_bytes", int),
    ("ssd_enabled", "ssd.enabled", bool),
    ("ssd_storage_dir", "ssd.storage_dir", str),
    ("ssd_capacity_bytes", "ssd.capacity_bytes", int),
    ("copy_to_ssd_async", "copy_pipeline.async_enabled", bool),
    ("copy_to_ssd_queue_depth", "copy_pipeline.queue_depth", int),
    ("ssd_segment_size_bytes", "ssd.segment_size_bytes", int),
    ("ssd_batch_max_ops", "copy_pipeline.batch_max_ops", int),
    ("ssd_queue_depth", "ssd.io.queue_depth", int),
    ("ssd_writer_threads", "copy_pipeline.worker_threads", int),
    ("ssd_enable_background_gc", "ssd.durability.enable_background_gc", bool),
    ("auto_promote_on_read", "eviction.auto_promote_on_read", bool),
    ("eviction_policy", "eviction.policy", str),
    ("eviction_candidate_window", "eviction.candidate_window", int),
    ("ssd_io_backend", "ssd.io.backend", _io_backend),
    ("ssd_durability_mode", "ssd.durability.mode", _durability_mode),
    ("ssd_backend", "ssd_backend", lambda value: str(value).strip().lower()),
    ("spdk_nvme_pci_addr", "spdk_nvme_pci_addr", str),
    ("spdk_proxy_shm_name", "spdk_proxy_shm_name", str),
    ("spdk_proxy_startup_timeout_ms", "spdk_proxy_startup_timeout_ms", int),
    ("spdk_proxy_tenant_id", "spdk_proxy_tenant_id", int),
    ("spdk_proxy_max_channels", "spdk_proxy_max_channels", int),
    ("spdk_proxy_auto_start", "spdk_proxy_auto_start", bool),
]


def _set_path(cfg: Any, path: str, value: Any) -> None:
    """``cfg.<path> = value`` for a dotted ``path`` such as ``ssd.io.queue_depth``."""
    *parents, attr = path.split(".")
    target = cfg
    for parent in parents:
        target = getattr(target, parent)
    setattr(target, attr, value)


def _apply_extra(cfg: Any, extra: dict[str, Any]) -> None:
    """``cfg.<path> = convert(extra[key])`` for every field of _EXTRA_FIELDS whose key ``extra``
    has, as UMBPStore's chain of ``if key in extra`` assignments does."""
    for key, path, convert in _EXTRA_FIELDS:
        value = convert(extra[key]) if key in extra else None
        if value is not None:
            _set_path(cfg, path, value)


@dataclass
class Rank:
    tp_rank: int = 0
    tp_size: int = 1
    mla: bool = False


class StoreReplay:
    """UMBPStore's calls into mori.umbp, in its order (see the module doc)."""

    def __init__(self, extra: dict[str, Any], rank: Rank, pool: HostKV) -> None:
        umbp_mod = importlib.import_module("mori.umbp")
        UMBPClient, UMBPConfig, UMBPRole = umbp_mod.UMBPClient, umbp_mod.UMBPConfig, umbp_mod.UMBPRole
        UMBPIoBackend = getattr(umbp_mod, "UMBPIoBackend", None)
        UMBPDurabilityMode = getattr(umbp_mod, "UMBPDurabilityMode", None)
        UMBPDistributedConfig = getattr(umbp_mod, "UMBPDistributedConfig", None)
        assert None not in (UMBPIoBackend, UMBPDurabilityMode, UMBPDistributedConfig)
        self.rank, self.pool = rank, pool

        cfg = UMBPConfig.from_environment()
        cfg.role = UMBPRole.Standalone
        _apply_extra(cfg, extra)

        master_address = extra.get("master_address", os.getenv("UMBP_MASTER_ADDRESS") or None)
        if master_address:
            dist_cfg = UMBPDistributedConfig()
            dist_cfg.master_config.master_address = str(master_address)
            node_address = str(extra["node_address"])
            dist_cfg.master_config.node_address = node_address
            dist_cfg.master_config.node_id = f"{node_address}:dp0:pp0:tp{rank.tp_rank}"
            if "auto_heartbeat" in extra:
                dist_cfg.master_config.auto_heartbeat = str(extra["auto_heartbeat"]).lower() in ("1", "true")
            dist_cfg.io_engine.host = node_address
            if "staging_buffer_size" in extra:
                dist_cfg.staging_buffer_size = int(extra["staging_buffer_size"])
            if "cache_remote_fetches" in extra:
                dist_cfg.cache_remote_fetches = str(extra["cache_remote_fetches"]).lower() in ("1", "true")
            if hasattr(dist_cfg, "dram_page_size"):
                dist_cfg.dram_page_size = int(pool.get_page_buffer_meta(pool.indices([0]))[1][0])
            cfg.distributed = dist_cfg

        self.is_mla_follower = False
        if cfg.distributed is None and rank.mla and rank.tp_size > 1:
            cfg.ssd.enabled = True
            if rank.tp_rank == 0:
                cfg.role = UMBPRole.SharedSSDLeader
            else:
                cfg.role = UMBPRole.SharedSSDFollower
                self.is_mla_follower = True
        if (
            cfg.ssd.enabled
            and not self.is_mla_follower
            and not (rank.mla and rank.tp_size > 1)
            and cfg.ssd_backend not in ("spdk", "spdk_proxy")
            and rank.tp_size > 1
        ):
            cfg.ssd.storage_dir = os.path.join(cfg.ssd.storage_dir, f"tp{rank.tp_rank}")
        self.cfg = cfg
        self.client = UMBPClient(cfg)
        if bool(self.client.is_distributed()) and hasattr(self.client, "register_memory"):
            kv = pool.kv_buffer
            assert bool(self.client.register_memory(int(kv.ctypes.data), int(kv.size * kv.itemsize)))
        self.suffix = "" if rank.mla else f"{rank.tp_rank}"

    # -- UMBPStore's key layout -------------------------------------------------------------------
    def key_strs(self, keys: list[str]) -> list[str]:
        if self.rank.mla:
            return [f"{k}_{self.suffix}_k" for k in keys]
        return [f"{k}_{self.suffix}_{part}" for k in keys for part in ("k", "v")]

    def _per_page(self, results: list[bool]) -> list[bool]:
        if self.rank.mla:
            return list(results)
        return [k and v for k, v in zip(results[::2], results[1::2], strict=True)]

    # -- batch_set_v1 / batch_get_v1 / batch_exists --------------------------------------------------
    def batch_set_v1(self, keys: list[str], host_indices: np.ndarray, prefix_keys: list[str] | None = None) -> list:
        if self.is_mla_follower:
            return [True] * (len(host_indices) // self.pool.page_size)
        ptrs, sizes = self.pool.get_page_buffer_meta(host_indices)
        key_strs = self.key_strs(keys)
        if prefix_keys is not None:
            per_key = 1 if self.rank.mla else 2
            depths = [len(prefix_keys) + i for i in range(len(keys)) for _ in range(per_key)]
            results = self.client.batch_put_from_ptr_with_depth(key_strs, list(ptrs), list(sizes), depths)
        else:
            results = self.client.batch_put_from_ptr(key_strs, list(ptrs), list(sizes))
        return self._per_page(results)

    def batch_get_v1(self, keys: list[str], host_indices: np.ndarray) -> list[bool]:
        ptrs, sizes = self.pool.get_page_buffer_meta(host_indices)
        return self._per_page(self.client.batch_get_into_ptr(self.key_strs(keys), list(ptrs), list(sizes)))

    def batch_exists(self, keys: list[str]) -> int:
        return self.client.batch_exists_consecutive(self.key_strs(keys)) // (1 if self.rank.mla else 2)

    def close(self) -> None:
        """UMBPStore.close(): flush, then drop the client without closing it (a dropped
        client leaves the pool, as MORI's does when its destructor runs)."""
        if self.client is None:
            return
        self.client.flush()
        self.client = None


def consecutive(model: set[str], key_strs: list[str], per_page: int) -> int:
    """The independent model of batch_exists: leading pages all of whose parts were stored."""
    n = 0
    while n < len(key_strs) and key_strs[n] in model:
        n += 1
    return n // per_page


def run_hicache_round(store: StoreReplay, reader: StoreReplay, seed: int) -> None:
    """Stores a prefix with ``store``, then probes and reads it back with ``reader``."""
    keys = prefix_hashes(8, seed)
    reference = [store.pool.page(i) for i in range(5)]  # what the stored pages hold now
    model: set[str] = set()
    # Pages 0..4 of the prefix (the first with prefix metadata: the _with_depth call).
    assert store.batch_set_v1(keys[:2], store.pool.indices([0, 1]), prefix_keys=[]) == [True, True]
    assert store.batch_set_v1(keys[2:5], store.pool.indices([2, 3, 4])) == [True] * 3
    model |= set(store.key_strs(keys[:5]))
    # A first writer wins: storing page 0 again from other bytes changes nothing.
    assert store.batch_set_v1(keys[:1], store.pool.indices([9])) == [True]

    assert reader.batch_exists(keys) == consecutive(model, reader.key_strs(keys), 1 if reader.rank.mla else 2) == 5
    assert reader.batch_exists(keys[5:]) == 0
    assert reader.client.batch_exists(reader.key_strs(keys[3:7])) == [k in model for k in reader.key_strs(keys[3:7])]

    # A get fills other pages of the reader's host pool (as HiCache loads into free host pages).
    reader.pool.zero([6, 7, 8, 9, 10, 11])
    got = reader.batch_get_v1(keys[:6], reader.pool.indices([6, 7, 8, 9, 10, 11]))
    assert got == [True] * 5 + [False]
    for i in range(5):
        np.testing.assert_array_equal(reader.pool.page(6 + i), reference[i])
    assert not reader.pool.page(11).any()  # the miss wrote nothing


# -- the local (standalone) mode ----------------------------------------------------------------------
def test_local_mode_runs_umbpstore_unchanged(tmp_path, monkeypatch):
    monkeypatch.delenv("UMBP_MASTER_ADDRESS", raising=False)
    extra = {
        "dram_capacity_bytes": 4 << 20,
        "ssd_enabled": True,
        "ssd_storage_dir": str(tmp_path / "ssd"),
        "ssd_capacity_bytes": 64 << 20,
        "copy_to_ssd_async": True,
        "copy_to_ssd_queue_depth": 256,
        "ssd_segment_size_bytes": 8 << 20,
        "ssd_queue_depth": 64,
        "ssd_writer_threads": 1,
        "eviction_policy": "prefix_aware_lru",
        "eviction_candidate_window": 8,
        "ssd_io_backend": "pthread",
        "ssd_durability_mode": "relaxed",
        "ssd_backend": "posix",
        "spdk_proxy_max_channels": 4,
    }
    pool = HostKV(PAGES, mla=False, seed=1)
    store = StoreReplay(extra, Rank(), pool)
    try:
        assert not store.client.is_distributed()
        assert store.cfg.ssd.storage_dir == str(tmp_path / "ssd")
        run_hicache_round(store, store, seed=1)
        # The legacy interface: set / get / batch_set / batch_get / exists on raw pointers.
        client, (k0,) = store.client, prefix_hashes(1, 99)
        src = np.arange(4096, dtype=np.uint8)
        assert client.put_from_ptr(k0, src.ctypes.data, src.nbytes)
        dst = np.zeros_like(src)
        assert client.get_into_ptr(k0, dst.ctypes.data, dst.nbytes) and np.array_equal(dst, src)
        assert client.exists(k0) and not client.exists(k0 + "_x")
        two = prefix_hashes(2, 98)
        bufs = [np.full(8192, i + 1, dtype=np.uint8) for i in range(2)]
        assert all(client.batch_put_from_ptr(two, [b.ctypes.data for b in bufs], [8192, 8192]))
        outs = [np.zeros(8192, dtype=np.uint8) for _ in range(2)]
        missing = prefix_hashes(1, 97)[0]
        res = client.batch_get_into_ptr(
            [*two, missing], [*(o.ctypes.data for o in outs), dst.ctypes.data], [8192, 8192, 4096]
        )
        assert list(res) == [True, True, False] and all(np.array_equal(o, b) for o, b in zip(outs, bufs, strict=True))
        # clear, then nothing exists; flush answers True.
        client.clear()
        assert store.batch_exists(prefix_hashes(8, 1)) == 0 and not client.exists(k0)
        assert client.flush()
    finally:
        store.close()
    # The settings that do nothing here were noted (logged once), none was silent.
    assert {
        "UMBPConfig.ssd.io.queue_depth",
        "UMBPConfig.ssd.durability.mode",
        "UMBPConfig.ssd.segment_size_bytes",
        "UMBPConfig.copy_pipeline.worker_threads",
        "UMBPConfig.ssd.io.backend",
        "UMBPConfig.ssd.spdk_proxy_max_channels",
    } <= noted_settings()


def test_an_mha_rank_of_tp2_gets_its_own_ssd_directory(tmp_path, monkeypatch):
    """UMBPStore gives each MHA rank of a TP group its own SSD directory (<dir>/tp<rank>)."""
    monkeypatch.delenv("UMBP_MASTER_ADDRESS", raising=False)
    extra = {"dram_capacity_bytes": 4 << 20, "ssd_enabled": True, "ssd_storage_dir": str(tmp_path)}
    store = StoreReplay(extra, Rank(tp_rank=1, tp_size=2), HostKV(PAGES, mla=False, seed=3))
    try:
        assert store.cfg.ssd.storage_dir == str(tmp_path / "tp1")
        assert (tmp_path / "tp1").is_dir()
        run_hicache_round(store, store, seed=3)
        assert store.key_strs(["ab"]) == ["ab_1_k", "ab_1_v"]
    finally:
        store.close()


# -- MLA with TP > 1: the shared-SSD leader and follower ------------------------------------------------
def test_mla_tp2_leader_writes_through_and_the_follower_reads_the_shared_ssd(tmp_path, monkeypatch):
    monkeypatch.delenv("UMBP_MASTER_ADDRESS", raising=False)
    extra = {"dram_capacity_bytes": 4 << 20, "ssd_storage_dir": str(tmp_path), "ssd_capacity_bytes": 32 << 20}
    leader = StoreReplay(extra, Rank(0, 2, mla=True), HostKV(PAGES, mla=True, seed=5))
    follower = StoreReplay(extra, Rank(1, 2, mla=True), HostKV(PAGES, mla=True, seed=6))
    try:
        umbp = importlib.import_module("mori.umbp")
        assert (leader.cfg.role, follower.cfg.role) == (umbp.UMBPRole.SharedSSDLeader, umbp.UMBPRole.SharedSSDFollower)
        assert leader.cfg.ssd.storage_dir == follower.cfg.ssd.storage_dir == str(tmp_path)  # shared, not per rank
        assert leader.key_strs(["ab"]) == ["ab__k"]  # MLA keys: empty rank suffix
        run_hicache_round(leader, follower, seed=5)
        # The follower stores nothing: UMBPStore skips its writes, MORI's client refuses them.
        keys = prefix_hashes(2, 7)
        assert follower.batch_set_v1(keys, follower.pool.indices([0, 1])) == [True, True]
        assert follower.batch_exists(keys) == 0
        buf = np.ones(4096, dtype=np.uint8)
        assert follower.client.batch_put_from_ptr([keys[0] + "__k"], [buf.ctypes.data], [4096]) == [False]
        # What the leader evicts from its SSD the follower no longer finds.
        leader_keys = leader.key_strs(prefix_hashes(8, 5)[:5])
        leader.client.clear()
        assert follower.client.batch_exists(leader_keys) == [True] * 5  # promoted into its own DRAM
        follower.client.clear()
        assert follower.batch_exists(prefix_hashes(8, 5)) == 0
    finally:
        follower.close()
        leader.close()


def test_a_shared_ssd_role_without_the_ssd_tier_is_a_config_error(tmp_path):
    umbp = importlib.import_module("mori.umbp")
    config = umbp.UMBPConfig(umbp.UMBPDramConfig(4 << 20))
    config.follower_mode = True  # MORI's older switch of the follower role
    with pytest.raises(ConfigError, match=r"role=SharedSSDFollower .* needs ssd.enabled=True"):
        umbp.UMBPClient(config)


# -- the distributed mode: a real master and two nodes ----------------------------------------------------
def test_distributed_mode_runs_umbpstore_unchanged(monkeypatch):
    with MasterServer(master_config()) as master:
        monkeypatch.setenv("UMBP_MASTER_ADDRESS", master.address)
        extra = {
            "node_address": "127.0.0.1",
            "dram_capacity_bytes": 2 << 20,
            "staging_buffer_size": 4 << 20,
            "auto_heartbeat": "true",
            "cache_remote_fetches": "false",
        }
        tp0 = StoreReplay(extra, Rank(0, 2), HostKV(PAGES, mla=False, seed=11))
        tp1 = StoreReplay(extra, Rank(1, 2), HostKV(PAGES, mla=False, seed=12))
        try:
            assert tp0.client.is_distributed() and tp1.client.is_distributed()
            assert tp0.cfg.distributed.master_config.node_id == "127.0.0.1:dp0:pp0:tp0"
            assert tp1.cfg.distributed.master_config.node_id == "127.0.0.1:dp0:pp0:tp1"
            assert tp0.cfg.distributed.dram_page_size == tp0.pool.page_bytes() == 4096
            assert all(master.master.store.get_node(f"127.0.0.1:dp0:pp0:tp{r}") is not None for r in (0, 1))
            # Each rank stores and reads its own keys; the other rank's node may hold the pages.
            run_hicache_round(tp0, tp0, seed=21)
            run_hicache_round(tp1, tp1, seed=22)
            # Across nodes: rank 1 probes and reads what rank 0 stored (rank 0's key suffix).
            keys = prefix_hashes(3, 23)
            assert tp0.batch_set_v1(keys, tp0.pool.indices([0, 1, 2])) == [True] * 3
            cross = tp0.key_strs(keys)
            assert tp1.client.batch_exists_consecutive(cross) == 6
            outs = [np.zeros(4096, dtype=np.uint8) for _ in cross]
            assert tp1.client.batch_get_into_ptr(cross, [o.ctypes.data for o in outs], [4096] * 6) == [True] * 6
            expected = [tp0.pool.part_bytes(page, part) for page in (0, 1, 2) for part in (0, 1)]
            assert [out.tobytes() for out in outs] == expected
            assert tp0.client.flush() and tp1.client.flush()
        finally:
            tp1.close()
            tp0.close()
        # Dropped as UMBPStore.close() drops them, both nodes leave the pool (MORI's destructor).
        registry = master.master.store
        ids = ["127.0.0.1:dp0:pp0:tp0", "127.0.0.1:dp0:pp0:tp1"]
        assert wait_for(lambda: all(registry.get_node(i) is None for i in ids), timeout=10)


# -- from_environment() and the later revision's spelling -------------------------------------------------------
def test_from_environment_is_moris(monkeypatch, tmp_path):
    umbp = importlib.import_module("mori.umbp")
    for name in ("UMBP_ROLE", "LOCAL_RANK", "UMBP_SSD_BACKEND", "UMBP_SPDK_NVME_PCI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UMBP_MASTER_ADDRESS", "127.0.0.1:1")
    cfg = umbp.UMBPConfig.from_environment()
    assert cfg.distributed is None and cfg.role == umbp.UMBPRole.Standalone  # MORI reads no distributed config
    assert cfg.ssd_backend == cfg.ssd.ssd_backend == "file"
    monkeypatch.setenv("LOCAL_RANK", "1")  # a launcher's rank: MORI's leader/follower default
    assert umbp.UMBPConfig.from_environment().role == umbp.UMBPRole.SharedSSDFollower
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert umbp.UMBPConfig.from_environment().role == umbp.UMBPRole.SharedSSDLeader
    monkeypatch.setenv("UMBP_ROLE", "standalone")
    assert umbp.UMBPConfig.from_environment().role == umbp.UMBPRole.Standalone
    monkeypatch.setenv("UMBP_ROLE", "boss")
    with pytest.raises(ConfigError, match=r"UMBP_ROLE='boss'"):
        umbp.UMBPConfig.from_environment()
    monkeypatch.delenv("UMBP_ROLE")
    monkeypatch.setenv("UMBP_SPDK_NVME_PCI", "0000:47:00.0")  # a PCI address alone selects SPDK
    monkeypatch.setenv("UMBP_SPDK_PROXY_MAX_RANKS", "3")  # the older name of MAX_CHANNELS
    cfg = umbp.UMBPConfig.from_environment()
    assert (cfg.ssd.ssd_backend, cfg.spdk_nvme_pci_addr, cfg.ssd.spdk_proxy_max_channels) == ("spdk", "0000:47:00.0", 3)


def test_the_later_revisions_spelling(tmp_path, monkeypatch):
    umbp = importlib.import_module("mori.umbp")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    cfg = umbp.UMBPConfig.from_environment()
    cfg.role = umbp.UMBPRole.Standalone
    cfg.dram.capacity_bytes = 4 << 20
    cfg.ssd.enabled = True
    cfg.ssd.storage_dir = str(tmp_path)
    cfg.ssd.io.backend = umbp.UMBPIoBackend.Posix
    assert umbp.UMBPIoBackend.Posix is umbp.UMBPIoBackend.PThread
    cfg.ssd.ssd_backend = "file"
    cfg.ssd.spdk_proxy_tenant_id = 2
    assert cfg.spdk_proxy_tenant_id == 2  # one setting, two spellings
    with umbp.UMBPClient(cfg) as client:
        assert client.get_deployment_mode() == umbp.UMBPDeploymentMode.Local and not client.is_distributed()
    cfg.ssd_backend = "dummy_storage"  # neither revision's choice: refused, not silently kept
    with pytest.raises(ConfigError, match=r"ssd.ssd_backend='dummy_storage'"):
        umbp.UMBPClient(cfg)


def test_the_later_revision_in_distributed_mode(monkeypatch):
    """080d033c's additions: node tags, one copy worker, the SSD staging fields (set when the config
    has them), get_deployment_mode(), registration of the pool's whole storage, the v2 side-pool keys
    (``<prefix>_<hash>_<rank>_<pool>_k``) through batch_exists / batch_put / batch_get, and its KV-event
    subscriber's report / revoke calls with UMBPTierType.HBM / DRAM."""
    umbp = importlib.import_module("mori.umbp")
    UMBPDistributedConfig = getattr(umbp, "UMBPDistributedConfig", None)
    UMBPDeploymentMode = getattr(umbp, "UMBPDeploymentMode", None)
    assert getattr(umbp, "UMBPStandaloneProcessConfig", None) is not None
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    with MasterServer(master_config()) as master:
        nodes, pools = [], []
        try:
            for rank in (0, 1):
                pool = HostKV(PAGES, mla=False, seed=40 + rank)
                cfg = umbp.UMBPConfig.from_environment()
                cfg.role = umbp.UMBPRole.Standalone
                cfg.dram.capacity_bytes = 2 << 20
                dist_cfg = UMBPDistributedConfig()
                dist_cfg.master_config.master_address = master.address
                cfg.copy_pipeline.worker_threads = 1  # extra_config had no ssd_copy_worker_threads
                dist_cfg.master_config.node_address = "127.0.0.1"
                dist_cfg.master_config.node_id = f"127.0.0.1:dp0:pp0:tp{rank}"
                if hasattr(dist_cfg.master_config, "tags"):
                    dist_cfg.master_config.tags = ["sgl_role=prefill", f"tp={rank}"]
                dist_cfg.io_engine.host = "127.0.0.1"
                dist_cfg.staging_buffer_size = 4 << 20
                assert not hasattr(dist_cfg, "ranged_scratch_size")  # the client skips it then
                if hasattr(dist_cfg, "ssd_staging_buffer_size"):
                    dist_cfg.ssd_staging_buffer_size = 1 << 20
                if hasattr(dist_cfg, "ssd_staging_buffer_slots"):
                    dist_cfg.ssd_staging_buffer_slots = 4
                dist_cfg.cache_remote_fetches = False
                dist_cfg.dram_page_size = pool.page_bytes()
                cfg.distributed = dist_cfg
                cfg.follower_mode = rank == 1  # a shared-SSD switch: no effect on a pool node, and noted
                client = umbp.UMBPClient(cfg)
                nodes.append(client)
                pools.append(pool)
                assert client.get_deployment_mode() == UMBPDeploymentMode.Distributed
                assert client.get_deployment_mode() != UMBPDeploymentMode.StandaloneProcess
                assert bool(client.is_distributed())
                kv = pool.kv_buffer
                assert bool(client.register_memory(int(kv.ctypes.data), int(kv.nbytes)))
            assert {"UMBPConfig.copy_pipeline.worker_threads", "UMBPConfig.follower_mode"} <= noted_settings()

            # v2 side pool "swa" (K and V components), keys with the config prefix.
            prefix, pages = "tag_org-model", prefix_hashes(3, 41)
            keys = [f"{prefix}_{h}_0_swa_{part}" for h in pages for part in ("k", "v")]
            ptrs, sizes = pools[0].get_page_buffer_meta(pools[0].indices([0, 1, 2]))
            assert [bool(v) for v in nodes[0].batch_put_from_ptr(keys, ptrs, sizes)] == [True] * 6
            assert list(nodes[1].batch_exists([*keys, f"{prefix}_{pages[0]}_1_swa_k"])) == [True] * 6 + [False]
            pools[1].zero([3, 4, 5])
            ptrs1, sizes1 = pools[1].get_page_buffer_meta(pools[1].indices([3, 4, 5]))
            assert [bool(v) for v in nodes[1].batch_get_into_ptr(keys, ptrs1, sizes1)] == [True] * 6
            for i in range(3):
                np.testing.assert_array_equal(pools[1].page(3 + i), pools[0].page(i))

            # The KV-event subscriber's calls, checked through the other node's match.
            tier = umbp.UMBPTierType
            hashes = [str(h) for h in (1234567, 7654321, 42)]
            assert nodes[0].report_external_kv_blocks(hashes, tier.DRAM)
            (match,) = nodes[1].match_external_kv(hashes)
            assert match.node_id == "127.0.0.1:dp0:pp0:tp0" and sorted(match.hashes_by_tier[tier.DRAM]) == sorted(
                hashes
            )
            assert nodes[0].revoke_external_kv_blocks(hashes[:1], tier.DRAM)
            (match,) = nodes[1].match_external_kv(hashes)
            assert sorted(match.hashes_by_tier[tier.DRAM]) == sorted(hashes[1:])
            ok_hbm = nodes[0].revoke_all_external_kv_blocks_at_tier(tier.HBM)
            ok_dram = nodes[0].revoke_all_external_kv_blocks_at_tier(tier.DRAM)
            assert ok_hbm is not False and ok_dram is not False
            assert nodes[1].match_external_kv(hashes) == []
            assert all(bool(n.flush()) for n in nodes)
        finally:
            for client in reversed(nodes):
                client.close()
