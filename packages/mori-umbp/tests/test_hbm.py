# SPDX-License-Identifier: MIT
"""The HBM tier where there is no GPU (CI): asking for it is a typed error naming the argument
and why, and nothing is left behind; tier-scoped eviction (MORI's EvictKey ``tiers``) frees a
block only from the tier named. The GPU side is in test_hbm_gpu.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import PAGE, make_client, master_config, owner_and_writer

from mori.umbp import (
    ConfigError,
    InvalidArgumentError,
    MasterServer,
    TierUnavailableError,
    UMBPHbmConfig,
    UMBPTierType,
)
from mori.umbp.devmem import gpu_unavailable_reason
from mori.umbp.rpc import peer_pb

HBM, DRAM = int(UMBPTierType.HBM), int(UMBPTierType.DRAM)
no_gpu = pytest.mark.skipif(not gpu_unavailable_reason(), reason="this machine has a GPU: test_hbm_gpu.py covers it")


@no_gpu
def test_hbm_without_a_gpu_is_a_typed_error_and_leaves_nothing():
    why = re.escape(gpu_unavailable_reason())
    with MasterServer(master_config()) as master:
        with pytest.raises(TierUnavailableError, match=rf"hbm.capacity_bytes=1048576 needs a CUDA GPU: {why}"):
            make_client(master.address, "no-gpu", 4 * PAGE, hbm=UMBPHbmConfig(1 << 20, PAGE))
        assert master.master.alive_nodes() == {}  # it never registered
        with make_client(master.address, "host-only", 4 * PAGE) as c:
            buf = np.zeros(PAGE, np.uint8)
            with pytest.raises(TierUnavailableError, match=rf"device_id=0 needs a CUDA GPU: {why}"):
                c.register_memory(buf.ctypes.data, PAGE, 0)
            with pytest.raises(InvalidArgumentError, match=r"device_id=-2 must be -1 \(host\) or a CUDA ordinal"):
                c.register_memory(buf.ctypes.data, PAGE, -2)
            with pytest.raises(InvalidArgumentError, match=r"tensor of type ndarray is not a torch\.Tensor"):
                c.put_from_tensor("k", buf)
            assert master.master.store.get_node("host-only").capacities == {DRAM: (4 * PAGE, 4 * PAGE)}
        with pytest.raises(ConfigError, match=r"hbm.capacity_bytes=-1 must be >= 0"):
            make_client(master.address, "neg", PAGE, hbm=UMBPHbmConfig(-1))


def test_eviction_frees_only_the_named_tier():
    with owner_and_writer("owner", 8 * PAGE, "writer") as (_master, owner, w):
        data = np.arange(PAGE, dtype=np.uint8)
        assert w.batch_put_from_ptr(["a", "b", "c"], [data.ctypes.data] * 3, [PAGE] * 3) == [True] * 3
        stub = w._peer(owner.peer_address)

        def evict(keys, tiers):
            res = stub.EvictKey(peer_pb.EvictKeyRequest(keys=keys, tiers=tiers), timeout=2)
            return [(e.key, e.bytes_freed) for e in res.evicted]

        assert evict(["a", "b"], [HBM, HBM]) == [("a", 0), ("b", 0)]  # they are DRAM blocks
        assert evict(["a", "b"], [DRAM]) == [("a", PAGE), ("b", PAGE)]  # one tier for two keys: ignored
        assert evict(["c", "zz"], [DRAM, DRAM]) == [("c", PAGE), ("zz", 0)]
        assert owner.store.keys() == [] and owner.store.capacities() == {DRAM: (8 * PAGE, 8 * PAGE)}
        assert owner.flush() and w.batch_exists(["a", "b", "c"]) == [False] * 3
        # clear(): every block of the node goes, the master hears of it, the pages come back.
        assert w.batch_put_from_ptr(["d", "e"], [data.ctypes.data] * 2, [PAGE] * 2) == [True] * 2
        assert owner.clear() and w.batch_exists(["d", "e"]) == [False, False]
        assert owner.store.capacities() == {DRAM: (8 * PAGE, 8 * PAGE)}
