# SPDX-License-Identifier: MIT
"""NOTE [restart grace]: a master restarted on the Redis store after being down longer than the
node expiry keeps the nodes that were alive when it went down, and answers from the store at
once; a node that was already dead then still expires."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest
from conftest import PAGE, free_port, make_client, master_config, wait_for
from test_redis_store import redis_uri  # noqa: F401  (the fixture: a real redis-server)

from mori.umbp import MasterServer, MasterUnavailableError
from mori.umbp.master.store import NodeInfo

pytestmark = pytest.mark.timeout(90)


def test_restarted_master_keeps_live_nodes_and_serves_at_once(redis_uri):  # noqa: F811
    config = master_config(
        metadata_backend="redis",
        redis_uri=redis_uri,
        redis_namespace=f"grace-{uuid.uuid4().hex[:8]}",
        listen_address=f"127.0.0.1:{free_port()}",
    )
    expiry = config.timing.heartbeat_ttl_s * config.timing.max_missed
    data = np.arange(PAGE, dtype=np.uint8) % 251
    first = MasterServer(config).start()
    with make_client(first.address, "grace-owner", 8 * PAGE), make_client(first.address, "grace-reader") as reader:
        assert reader.put_from_ptr("kept", data.ctypes.data, PAGE)
        # A node that died long before the master went down.
        first.master.store.upsert_node(NodeInfo("long-dead", "h", "127.0.0.1:1", b"", [], {2: (PAGE, PAGE)}))
        first.master.store.update_heartbeat("long-dead", time.time() - 10 * expiry, {})
        first.shutdown()
        time.sleep(expiry + 1)  # down longer than the expiry: every stored heartbeat is stale now
        second = MasterServer(config).start()
        try:
            # At once, before any node heartbeats again: the live nodes and their blocks are there.
            assert {"grace-owner", "grace-reader"} <= set(second.master.alive_nodes())
            assert second.master.lookup(["kept"]) == [True]
            assert second.master.reap() == ["long-dead"]
            assert "grace-owner" in second.master.alive_nodes()

            def read_back() -> bool:
                try:
                    back = np.zeros(PAGE, np.uint8)
                    return reader.get_into_ptr("kept", back.ctypes.data, PAGE) and np.array_equal(back, data)
                except MasterUnavailableError:
                    return False  # the reader's channel may still be backing off from the dead master

            assert wait_for(read_back, timeout=10, every=0.2)
            # The kept nodes heartbeat again within their grace, so they stay past the expiry.
            time.sleep(expiry + 0.5)
            second.master.reap()
            assert {"grace-owner", "grace-reader"} <= set(second.master.alive_nodes())
            assert second.master.lookup(["kept"]) == [True]
        finally:
            second.shutdown()
