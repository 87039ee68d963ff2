# SPDX-License-Identifier: MIT
"""The HBM tier on a GPU: peers that own pages of a CUDA tensor, a master that routes puts to HBM
first, eviction that demotes HBM blocks to the owner's DRAM (checked against an independent
model of the master's LRU and the peer's demotion), clients reading and writing from CUDA
memory (mori-io's P2P backend GPU to GPU, TCP staging otherwise), and a peer dying mid-put.
Every byte read back is compared with numpy. Marked ``gpu``: skips with the reason without torch
and a CUDA device; on one GPU the processes share it (run under MPS, see docs/developer-guide/gpu.md).
"""

from __future__ import annotations

import contextlib
import importlib
import time

import numpy as np
import pytest
from conftest import PAGE, PeerProcess, make_client, master_config, running_cluster, wait_for

from mori.io import StatusCode
from mori.umbp import MasterServer, PeerUnavailableError, UMBPHbmConfig, UMBPSsdConfig, UMBPTierType
from mori.umbp.devmem import gpu_unavailable_reason
from mori.umbp.master.core import MasterTiming
from mori.umbp.rpc import peer_pb

WHY_NOT = gpu_unavailable_reason()
torch = importlib.import_module("torch") if not WHY_NOT else None
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(bool(WHY_NOT), reason=f"needs a GPU: {WHY_NOT}")]

HBM, DRAM, SSD = int(UMBPTierType.HBM), int(UMBPTierType.DRAM), int(UMBPTierType.SSD)


def blocks(n: int, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size, dtype=np.uint8) for _ in range(n)]


def cuda_bytes(n: int):
    return torch.zeros(n, dtype=torch.uint8, device="cuda:0")


def to_cuda(data: list[np.ndarray]):
    """One CUDA tensor holding the blocks back to back (uploaded and synchronised)."""
    t = torch.from_numpy(np.concatenate(data)).to("cuda:0")
    torch.cuda.synchronize()
    return t


def host(t) -> np.ndarray:
    torch.cuda.synchronize()
    return t.cpu().numpy()


@pytest.fixture
def gpu_cluster():
    peers = ({"node_id": f"gpu-peer-{i}", "capacity": 16 * PAGE, "hbm_bytes": 32 * PAGE} for i in range(3))
    with running_cluster("gpu-reader", *peers) as started:
        yield started


@pytest.mark.timeout(180)
def test_put_get_hbm_blocks_across_three_peer_processes(gpu_cluster, monkeypatch):
    master, peers, client = gpu_cluster
    size = 2 * PAGE + 123  # three pages, the last one partial
    data = blocks(24, size, 1)
    keys = [f"{'cd' * 32}_{i}_k" for i in range(24)]
    src = to_cuda(data)
    assert client.register_torch_tensor(src)
    ptrs = [src.data_ptr() + i * size for i in range(24)]
    assert client.batch_put_from_ptr(keys, ptrs, [size] * 24) == [True] * 24
    # HBM first: 72 of the 96 HBM pages, spread by most_available; no block in DRAM.
    tiers = {p.node_id: p.ask("tiers")[0] for p in peers}
    assert sorted(k for t in tiers.values() for k in t) == sorted(keys)
    assert all(t and set(t.values()) == {HBM} for t in tiers.values()), tiers

    # Into registered CUDA memory (P2P from the owners' HBM), host memory (TCP) and an
    # unregistered CUDA tensor (TCP into host staging, then a torch copy).
    out = cuda_bytes(24 * size)
    client.register_torch_tensor(out)
    got = client.batch_get_into_ptr(keys, [out.data_ptr() + i * size for i in range(24)], [size] * 24)
    assert got == [True] * 24 and np.array_equal(host(out), np.concatenate(data))
    owner = next(p for p in peers if keys[23] in tiers[p.node_id])
    assert owner.ask("inbound", "umbp-gpu-reader", client._mover.last_uid) is None  # P2P leaves no status
    on_host = [np.zeros(size, np.uint8) for _ in keys]
    assert client.batch_get_into_ptr(keys, [b.ctypes.data for b in on_host], [size] * 24) == [True] * 24
    assert all(np.array_equal(a, b) for a, b in zip(data, on_host, strict=True))
    loose = cuda_bytes(size)
    assert client.get_into_tensor(keys[5], loose) and np.array_equal(host(loose), data[5])

    # A put from host memory lands in HBM too, and a client without the P2P backend reads it
    # over TCP (the owner then holds an inbound status).
    (extra,) = blocks(1, PAGE, 2)
    assert client.put_from_ptr("from-host", extra.ctypes.data, PAGE)
    monkeypatch.setenv("UMBP_IO_P2P", "0")
    with make_client(master.address, "tcp-reader", 0) as tcp:
        back = cuda_bytes(PAGE)
        tcp.register_torch_tensor(back)
        assert tcp.get_into_ptr("from-host", back.data_ptr(), PAGE) and np.array_equal(host(back), extra)
        holder = next(p for p in peers if "from-host" in p.ask("tiers")[0])
        assert holder.ask("tiers")[0]["from-host"] == HBM
        assert holder.ask("inbound", "umbp-tcp-reader", tcp._mover.last_uid) == int(StatusCode.SUCCESS)


class EvictionModel:
    """The master's watermark LRU (victims by last access, down to the low watermark) and the
    owner's demotion (an HBM victim moves to DRAM while DRAM has a free page, else it is
    dropped; a DRAM victim is dropped), for one owner and one-page blocks."""

    def __init__(self, hbm_pages: int, dram_pages: int, high: float = 0.9, low: float = 0.7) -> None:
        self.pages = {HBM: hbm_pages, DRAM: dram_pages}
        self.high, self.low = high, low
        self.tier: dict[str, int] = {}
        self.clock: list[str] = []  # least recently accessed first

    def put(self, key: str) -> None:
        self.tier[key] = HBM if list(self.tier.values()).count(HBM) < self.pages[HBM] else DRAM
        self.clock.append(key)

    def get(self, key: str) -> None:
        self.clock.remove(key)
        self.clock.append(key)

    def free(self) -> dict[int, int]:
        """Free pages per tier."""
        return {t: n - list(self.tier.values()).count(t) for t, n in self.pages.items()}

    def evict_pass(self) -> None:
        used = {t: list(self.tier.values()).count(t) for t in (HBM, DRAM)}  # the pass's snapshot
        for tier in (HBM, DRAM):
            total = self.pages[tier] * PAGE
            if used[tier] * PAGE <= self.high * total:
                continue
            need = used[tier] * PAGE - int(self.low * total)
            victims = [k for k in self.clock if self.tier.get(k) == tier][: -(-need // PAGE)]
            for key in victims:
                room = list(self.tier.values()).count(DRAM) < self.pages[DRAM]
                if tier == HBM and room:
                    self.tier[key] = DRAM
                else:
                    del self.tier[key]
                    self.clock.remove(key)


@pytest.mark.timeout(180)
def test_hbm_eviction_demotes_to_dram_like_the_model(monkeypatch):
    monkeypatch.setenv("UMBP_DRAM_READ_LEASE_MS", "1")  # the owner's read leases end at once
    # The owner fills its tiers before evicting on demand, so only the master's timed pass (at
    # its own 0.9 / 0.7 watermarks, which the model follows) evicts here.
    monkeypatch.setenv("UMBP_DRAM_HIGH_WM", "1.0")
    timing = MasterTiming(heartbeat_ttl_s=1.0, lease_s=0.0)  # and so do the master's
    config = master_config(timing=timing, eviction_check_interval_s=3600, high_watermark=0.9, low_watermark=0.7)
    with MasterServer(config) as master:
        owner = PeerProcess(master.address, "hbm-owner", 4 * PAGE, hbm_bytes=8 * PAGE)
        try:
            with make_client(master.address, "hbm-writer") as w:
                model = EvictionModel(hbm_pages=8, dram_pages=4)
                values: dict[str, np.ndarray] = {}
                dst = cuda_bytes(PAGE)
                w.register_torch_tensor(dst)

                def put(key: str) -> None:
                    values[key] = blocks(1, PAGE, len(values))[0]
                    assert w.put_from_ptr(key, values[key].ctypes.data, PAGE)
                    model.put(key)

                def get(key: str) -> None:
                    assert w.get_into_ptr(key, dst.data_ptr(), PAGE) and np.array_equal(host(dst), values[key])
                    model.get(key)

                def evict_pass() -> None:
                    time.sleep(0.05)
                    assert owner.ask("flush")  # the pass must see the owner's current capacities
                    master.evictor.run_once()
                    model.evict_pass()
                    tiers, _ = owner.ask("tiers")
                    assert tiers == model.tier
                    assert wait_for(lambda: index() == model.tier), (index(), model.tier)
                    # The writer places its puts itself, over the pool view the master sends with its
                    # periodic heartbeats (NOTE [direct put]): the room the pass freed reaches it there,
                    # not before, so the next puts must wait for it or go where the old view says.
                    assert wait_for(lambda: writer_sees() == model.free()), (writer_sees(), model.free())

                def index() -> dict[str, int]:
                    found = master.master.store.lookup(sorted(values))
                    return {k: loc.tier for k, locs in zip(sorted(values), found, strict=True) for loc in locs}

                def writer_sees() -> dict[int, int]:
                    """The owner's free pages per tier in the writer's pool view."""
                    caps = dict(w._view._caps.get(owner.node_id, {}))
                    return {t: avail // PAGE for t, (_, avail) in caps.items() if t in (HBM, DRAM)}

                for i in range(8):
                    put(f"h{i}")
                get("h0")
                get("h5")
                evict_pass()  # HBM 8/8: h1 h2 h3 move to DRAM (3 of its 4 pages)
                assert model.tier["h1"] == DRAM
                for i in (8, 9, 10):
                    put(f"h{i}")
                evict_pass()  # HBM 8/8 again: h4 moves (DRAM's last page); h6, h7 are dropped
                assert "h6" not in model.tier and model.tier["h4"] == DRAM
                evict_pass()  # DRAM 4/4: its two least recently used go
                assert sorted(k for k, t in model.tier.items() if t == DRAM) == ["h3", "h4"]
                for key in values:  # survivors read back intact from either tier, the rest miss
                    hit = w.get_into_ptr(key, dst.data_ptr(), PAGE)
                    assert hit == (key in model.tier), key
                    if hit:
                        assert np.array_equal(host(dst), values[key])
        finally:
            owner.kill()


@pytest.mark.timeout(180)
def test_a_peer_dying_mid_put_leaves_no_half_visible_hbm_block(gpu_cluster):
    _, peers, client = gpu_cluster
    (data,) = blocks(1, 3 * PAGE, 3)
    src = to_cuda([data])
    client.register_torch_tensor(src)
    (route,) = client._master.batch_route_put(["half"], [data.nbytes])
    assert route.tier == HBM
    victim = next(p for p in peers if p.node_id == route.node_id)
    stub = client._peer(route.peer_address)
    slot = stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=data.nbytes, tier=HBM, key="half"), timeout=2)
    assert slot.outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
    victim.kill()  # after the allocation, before the commit
    from mori.umbp.client.transfer import RemotePages

    remote = RemotePages(route.engine_desc, slot.descs[0], [p.page_index for p in slot.pages], slot.page_size)
    # The bytes may or may not reach the dead peer's pages (an opened IPC mapping outlives it).
    with contextlib.suppress(PeerUnavailableError):
        client._mover.write(src.data_ptr(), data.nbytes, remote, "victim", 0)
    with pytest.raises(Exception, match=r"UNAVAILABLE|failed to connect|Connection refused"):
        stub.CommitSlot(peer_pb.CommitSlotRequest(slot_id=slot.slot_id, key="half"), timeout=2)
    assert not client.exists("half")
    # The put routes again without the dead peer and lands whole in a live peer's HBM.
    assert client.put_from_ptr("half", src.data_ptr(), data.nbytes)
    live = [p for p in peers if p is not victim]
    assert [p.ask("tiers")[0].get("half") for p in live].count(HBM) == 1
    back = cuda_bytes(data.nbytes)
    assert client.get_into_tensor("half", back) and np.array_equal(host(back), data)

    # A writer that dies after writing into a live peer's HBM but before its commit: the key
    # stays invisible and the pending TTL gives the pages back.
    peer = live[0]
    hbm_free = peer.ask("caps")[HBM][1]
    peer_stub = client._peer(peer.address)
    orphan = peer_stub.AllocateSlot(peer_pb.AllocateSlotRequest(size=PAGE, tier=HBM, key="orphan"), timeout=2)
    assert orphan.outcome == peer_pb.AllocateSlotResponse.SUCCESS_ALLOCATED
    engine_desc = peer_stub.GetPeerInfo(peer_pb.GetPeerInfoRequest(), timeout=2).engine_desc
    pages = RemotePages(engine_desc, orphan.descs[0], [p.page_index for p in orphan.pages], orphan.page_size)
    client._mover.write(src.data_ptr(), PAGE, pages, "orphan's owner", 0)  # written, never committed
    assert peer.ask("caps")[HBM][1] == hbm_free - PAGE
    assert not client.exists("orphan")
    assert wait_for(lambda: peer.ask("caps")[HBM][1] == hbm_free, timeout=10, every=0.3)
    assert not client.exists("orphan")


@pytest.mark.timeout(120)
def test_a_node_with_hbm_serves_itself_demotes_and_spills(tmp_path):
    ssd = UMBPSsdConfig(True, str(tmp_path), 16 * PAGE)
    with (
        MasterServer(master_config()) as master,
        make_client(master.address, "self-hbm", 4 * PAGE, ssd=ssd, hbm=UMBPHbmConfig(8 * PAGE, PAGE)) as node,
    ):
        (data,) = blocks(1, PAGE - 5, 4)  # one SSD staging slot (PAGE) at most, so it spills
        src = to_cuda([data])
        assert node.put_from_tensor("own", src)  # the only node: a local device-to-device copy
        assert node.store.tiers() == {"own": HBM}
        back = cuda_bytes(data.nbytes)
        assert node.get_into_tensor("own", back) and np.array_equal(host(back), data)
        assert node.store.drain_spills(10) and node.store.ssd_keys() == ["own"]  # spilled from HBM
        assert wait_for(lambda: node.store.evict(["own"], [HBM]) == [("own", PAGE)], timeout=5)
        assert node.store.tiers() == {"own": DRAM}  # demoted, not dropped
        on_host = np.zeros(data.nbytes, np.uint8)
        assert node.get_into_ptr("own", on_host.ctypes.data, data.nbytes) and np.array_equal(on_host, data)
        assert node.store.evict(["own"], [DRAM]) == [("own", PAGE)]
        assert node.flush()
        (locations,) = master.master.store.lookup(["own"])
        assert {loc.tier for loc in locations} == {SSD}
        back.zero_()
        assert node.get_into_tensor("own", back) and np.array_equal(host(back), data)  # from the file


@pytest.mark.timeout(180)
def test_bench_hbm_profile_hits_match_the_trace_model(tmp_path):
    import json

    from mori.umbp.bench import cli, trace

    out = tmp_path / "bench.json"
    argv = ["--requests", "24", "--sessions", "4", "--blocks-per-turn", "2", "--seed", "5",
            "--block-bytes", "65536", "--peers", "2", "--peer-capacity", str(8 << 20), "--profile", "hbm",
            "--skip_mooncake", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["config"]["profile"] == "hbm"
    assert res["hits_per_request"] == trace.expected_hits(trace.synthetic(24, 4, 2, 5))
    assert res["corrupt_blocks"] == 0 and res["put_failed"] == 0


def test_the_local_mode_reads_and_writes_cuda_memory(tmp_path):
    from mori.umbp import UMBPClient, UMBPConfig, UMBPDramConfig

    config = UMBPConfig(UMBPDramConfig(4 * PAGE, PAGE), ssd=UMBPSsdConfig(True, str(tmp_path), 16 * PAGE))
    data = blocks(6, PAGE, 6)
    src = to_cuda(data)
    with UMBPClient(config) as local:
        assert local.register_torch_tensor(src)  # raw pointers into it are CUDA memory from now on
        ptrs = [src.data_ptr() + i * PAGE for i in range(6)]
        assert local.batch_put_from_ptr([f"c{i}" for i in range(6)], ptrs, [PAGE] * 6) == [True] * 6
        tiers = local.keys_by_tier()
        assert tiers["SSD"] and tiers["DRAM"]  # 6 pages into 4: some were demoted to SSD
        for i in range(6):  # from DRAM or from a file, into an unregistered CUDA tensor
            back = cuda_bytes(PAGE)
            assert local.get_into_tensor(f"c{i}", back) and np.array_equal(host(back), data[i])
