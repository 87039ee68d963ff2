# SPDX-License-Identifier: MIT
"""Drop-in details of MORI's UMBP API: the names its ``mori.umbp`` and ``mori.cpp`` export, their
no-argument constructors and defaults (MORI's config.h and pybind_umbp.cpp), RuntimeError as the
error root, the io-engine address a distributed node binds, empty node ids refused and empty hash
lists answered as MORI's master does, and every no-effect field logged and documented."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc  # type: ignore[import-untyped]
import numpy as np
import pytest
from conftest import master_config

import mori.umbp
from mori._compat import noted_settings
from mori.io import EngineDesc
from mori.umbp import (
    CacheRemoteAdmission,
    ConfigError,
    InvalidArgumentError,
    MasterServer,
    UMBPClient,
    UMBPConfig,
    UMBPCopyPipelineConfig,
    UMBPDistributedConfig,
    UMBPDramConfig,
    UMBPDurabilityConfig,
    UMBPDurabilityMode,
    UMBPError,
    UMBPExternalKvHitCountEntry,
    UMBPExternalKvMatch,
    UMBPExternalKvNodeMatch,
    UMBPIoBackend,
    UMBPIoConfig,
    UMBPIoEngineConfig,
    UMBPMasterClient,
    UMBPMasterClientConfig,
    UMBPRole,
    UMBPSsdConfig,
    UMBPSsdLayoutMode,
    UMBPStandaloneProcessConfig,
    UMBPTierType,
    auth,
    rpc,
)
from mori.umbp import errors as errors_module
from mori.umbp.client.inert import NO_EFFECT
from mori.umbp.rpc import pb, pb_grpc

MiB = 1 << 20
PAGE = 64 << 10
DOCS = Path(__file__).resolve().parents[3] / "docs" / "user-guide" / "compatibility.md"

#: What MORI's python/mori/umbp/__init__.py re-exports, plus the further mori.cpp UMBP names.
MORI_UMBP_NAMES = [
    "CacheRemoteAdmission",
    "UMBPClient",
    "UMBPConfig",
    "UMBPCopyPipelineConfig",
    "UMBPDeploymentMode",
    "UMBPDistributedConfig",
    "UMBPDramConfig",
    "UMBPDurabilityMode",
    "UMBPHostBufferBacking",
    "UMBPHostBufferHandle",
    "UMBPHostMemAllocator",
    "UMBPIoBackend",
    "UMBPIoConfig",
    "UMBPRole",
    "UMBPStandaloneProcessConfig",
    "UMBPSsdConfig",
    "UMBPEvictionConfig",
    "UMBPDurabilityConfig",
    "UMBPTierType",
    "UMBPExternalKvMatch",
    "UMBPExternalKvHitCountEntry",
    "UMBPMasterClient",
    "UMBPExternalKvNodeMatch",
    "UMBPMasterClientConfig",
    "UMBPIoEngineConfig",
    "UMBPSsdLayoutMode",
]


def test_every_mori_umbp_name_is_exported():
    missing = [n for n in MORI_UMBP_NAMES if not hasattr(mori.umbp, n)]
    assert missing == []
    assert set(MORI_UMBP_NAMES) <= set(mori.umbp.__all__)


def test_constructors_and_defaults_are_moris():
    assert [(m.name, int(m)) for m in CacheRemoteAdmission] == [("SIZE", 0), ("NEVER", 1), ("ALWAYS", 2)]
    assert [m.name for m in UMBPRole] == ["Standalone", "SharedSSDLeader", "SharedSSDFollower"]
    assert [m.name for m in UMBPIoBackend] == ["Posix", "IoUring"]
    assert [m.name for m in UMBPDurabilityMode] == ["Strict", "Relaxed"]
    assert [m.name for m in UMBPSsdLayoutMode] == ["SegmentedLog"]

    dram = UMBPDramConfig()
    assert (dram.capacity_bytes, dram.use_shared_memory, dram.shm_name) == (4 << 30, False, "/umbp_dram")
    assert (dram.high_watermark, dram.low_watermark) == (0.9, 0.7)
    assert (dram.use_hugepages, dram.hugepage_size, dram.numa_node, dram.prefault) == (False, 2 * MiB, -1, True)
    ssd = UMBPSsdConfig()
    assert (ssd.storage_dir, ssd.capacity_bytes, ssd.layout_mode, ssd.segment_size_bytes) == (
        "/tmp/umbp_ssd",
        32 << 30,
        UMBPSsdLayoutMode.SegmentedLog,
        256 * MiB,
    )
    assert (ssd.io.backend, ssd.io.queue_depth, ssd.durability.mode, ssd.durability.enable_background_gc) == (
        UMBPIoBackend.IoUring,
        4096,
        UMBPDurabilityMode.Strict,
        True,
    )
    assert (ssd.ssd_backend, ssd.spdk_reactor_mask, ssd.spdk_mem_size_mb, ssd.spdk_nvme_ctrl_name) == (
        "file",
        "0x1",
        256,
        "NVMe0",
    )
    assert (ssd.spdk_proxy_shm_name, ssd.spdk_proxy_max_channels, ssd.spdk_proxy_data_per_channel_mb) == (
        "/umbp_spdk_proxy",
        8,
        32,
    )
    assert (ssd.spdk_proxy_startup_timeout_ms, ssd.spdk_proxy_auto_start, ssd.spdk_proxy_idle_exit_timeout_ms) == (
        30000,
        True,
        30000,
    )
    pipe = UMBPCopyPipelineConfig()
    assert (pipe.async_enabled, pipe.queue_depth, pipe.worker_threads, pipe.batch_max_ops) == (True, 4096, 2, 128)
    assert (UMBPIoConfig().backend, UMBPDurabilityConfig().mode) == (UMBPIoBackend.IoUring, UMBPDurabilityMode.Strict)
    dist = UMBPDistributedConfig()
    assert (dist.io_engine.host, dist.io_engine.port, dist.staging_buffer_size) == ("", 0, 64 * MiB)
    assert (dist.cache_remote_fetches, dist.cache_remote_admission, dist.admission_max_block_bytes) == (
        True,
        CacheRemoteAdmission.SIZE,
        16 * MiB,
    )
    assert (dist.dram_page_size, dist.peer_service_port, dist.ssd_staging_buffer_slots) == (0, 0, 16)
    mc = UMBPMasterClientConfig()
    assert (mc.master_address, mc.node_id, mc.node_address, mc.auto_heartbeat, mc.tags) == ("", "", "", True, [])
    sp = UMBPStandaloneProcessConfig()
    assert (sp.address, sp.auto_start, sp.startup_timeout_ms, sp.worker_node_id, sp.tags) == ("", False, 30000, "", [])
    config = UMBPConfig()
    assert (config.role, config.follower_mode, config.force_ssd_copy_on_write) == (UMBPRole.Standalone, False, False)
    assert config.distributed is None and config.standalone_process is None

    # The result records construct empty and take assignments, as MORI's def_readwrite fields.
    for cls in (UMBPExternalKvMatch, UMBPExternalKvNodeMatch):
        m = cls()
        assert (m.node_id, m.peer_address, m.hashes_by_tier, m.matched_hash_count()) == ("", "", {}, 0)
        m.node_id, m.hashes_by_tier = "n", {UMBPTierType.DRAM: ["a", "b"], UMBPTierType.SSD: ["a"]}
        assert m.matched_hash_count() == 2 and repr(m) == f"<{cls.__name__} node_id='n' matched=2>"
    entry = UMBPExternalKvHitCountEntry()
    entry.hash, entry.hit_count_total = "h", 3
    assert (entry.hash, entry.hit_count_total) == ("h", 3)


def test_an_unknown_field_is_refused_not_kept():
    with pytest.raises(AttributeError):
        UMBPDramConfig().use_hugepage = True  # type: ignore[attr-defined]  # misspelt: no silent setting


def test_every_error_is_a_runtime_error_and_keeps_its_hierarchy():
    classes = [c for c in vars(errors_module).values() if isinstance(c, type) and issubclass(c, Exception)]
    assert UMBPError in classes and len(classes) >= 12
    assert all(issubclass(c, RuntimeError) and issubclass(c, UMBPError) for c in classes)
    assert issubclass(errors_module.InvalidKeyError, ValueError)
    assert issubclass(errors_module.TierCapacityError, errors_module.ValueTooLargeError)
    assert issubclass(errors_module.PeerUnavailableError, ConnectionError)
    with pytest.raises(RuntimeError, match=r"size=0 must be positive"):  # as code written for MORI catches it
        UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE))).put_from_ptr("k", 1, 0)


# -- the io engine's address -----------------------------------------------------------------------
def free_port_on(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def node(master: str, node_id: str, capacity: int, io_engine: UMBPIoEngineConfig | None = None) -> UMBPClient:
    mc = UMBPMasterClientConfig(master, node_id, "127.0.0.1")
    dist = UMBPDistributedConfig(mc, io_engine or UMBPIoEngineConfig(), staging_buffer_size=4 * MiB)
    return UMBPClient(UMBPConfig(UMBPDramConfig(capacity, PAGE), dist))


def test_the_io_engine_binds_where_io_engine_says_and_moves_the_bytes():
    port = free_port_on("127.0.0.2")
    with (
        MasterServer(master_config()) as master,
        node(master.address, "holder", 16 * PAGE, UMBPIoEngineConfig("127.0.0.2", port)) as holder,
        node(master.address, "writer", 0) as writer,
    ):
        desc = EngineDesc.unpack(holder._desc)
        assert (desc.host, desc.port) == ("127.0.0.2", port)
        assert holder.peer_address.startswith("127.0.0.1:")  # the peer service stays at node_address
        plain = EngineDesc.unpack(writer._desc)
        assert plain.host == "127.0.0.1" and plain.port not in (0, port)  # "" = the node address, a free port
        # The writer owns no DRAM: its put lands in the holder's pages through the holder's engine.
        data = np.random.default_rng(1).integers(0, 256, 3 * PAGE + 5, dtype=np.uint8)
        assert writer.put_from_ptr("blk", data.ctypes.data, data.nbytes)
        assert holder.store.keys() == ["blk"]
        out = np.zeros_like(data)
        assert writer.get_into_ptr("blk", out.ctypes.data, out.nbytes) and np.array_equal(out, data)


@pytest.mark.parametrize("port", [-1, 70000, "16000"])
def test_a_bad_io_engine_port_is_a_config_error(port):
    with pytest.raises(ConfigError, match=r"distributed.io_engine.port=.* must be an int in \[0, 65535\]"):
        node("127.0.0.1:1", "bad", 0, UMBPIoEngineConfig("127.0.0.1", port))


def test_io_engine_from_the_environment(monkeypatch):
    monkeypatch.setenv("UMBP_IO_ENGINE_HOST", "10.1.2.3")
    monkeypatch.setenv("UMBP_IO_ENGINE_PORT", "16000")
    monkeypatch.setenv("UMBP_NODE_ADDRESS", "10.9.9.9")
    config = UMBPConfig.from_environment("n", distributed=True)
    assert config.distributed is not None
    assert (config.distributed.io_engine.host, config.distributed.io_engine.port) == ("10.1.2.3", 16000)
    assert config.distributed.master_config.node_address == "10.9.9.9"


# -- node ids and hash lists -------------------------------------------------------------------------
def test_empty_node_ids_are_refused_and_empty_hash_lists_answered_empty():
    dram = UMBPTierType.DRAM
    with MasterServer(master_config()) as master, node(master.address, "n1", 0) as n1:
        mc = UMBPMasterClient(master.address)  # node_id "" (MORI's default): a query-only client
        for call, args in [
            (mc.report_external_kv_blocks, ("", ["a"], dram)),
            (mc.revoke_external_kv_blocks, ("", ["a"], dram)),
            (mc.revoke_all_external_kv_blocks_at_tier, ("", dram)),
        ]:
            with pytest.raises(InvalidArgumentError, match=r"node_id='' must not be empty"):
                call(*args)
        with pytest.raises(InvalidArgumentError, match=r"node_id='' must not be empty"):
            mc.register_self({dram: (PAGE, PAGE)})
        with pytest.raises(InvalidArgumentError, match=r"hashes='abc' must be a list of str, not str"):
            mc.report_external_kv_blocks("n1", "abc", dram)  # type: ignore[arg-type]
        # Empty lists: MORI's master answers them (no match, no count, no change); so does ours.
        assert mc.match_external_kv([]) == [] and mc.get_external_kv_hit_counts([]) == []
        assert n1.report_external_kv_blocks([], dram) and n1.match_external_kv([]) == []
        assert n1.revoke_external_kv_blocks([], dram)
        # The master refuses an empty id itself too (a client that skipped the check).
        secret = auth.member_secret(None, master.address)  # a member that skipped the client's checks
        stub = pb_grpc.UMBPMasterStub(rpc.channel(master.address, auth.ClientAuth("", lambda: secret)))
        with pytest.raises(grpc.RpcError) as err:
            stub.RegisterClient(pb.RegisterClientRequest(node_id="", node_address="127.0.0.1"), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "node_id=''" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            stub.ReportExternalKvBlocks(pb.ReportExternalKvBlocksRequest(node_id="", hashes=["a"], tier=2), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # The pool client's match hands back MORI's UMBPExternalKvMatch records.
        assert n1.report_external_kv_blocks(["h"], dram)
        (m,) = n1.match_external_kv(["h"])
        assert type(m) is UMBPExternalKvMatch and m.node_id == "n1"
        mc.close()


# -- no silent settings ------------------------------------------------------------------------------
def test_every_no_effect_field_is_documented():
    text = DOCS.read_text()
    section = text[text.index("## mori-umbp") :]
    for path, reason in NO_EFFECT:
        assert f"| `UMBPConfig.{path}` | {reason} |" in section, path


def test_no_effect_fields_set_are_logged_and_refused_ones_raise(tmp_path):
    before = noted_settings()
    with UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE))):
        pass
    assert noted_settings() == before  # MORI's defaults log nothing

    config = UMBPConfig(UMBPDramConfig(PAGE, PAGE, use_shared_memory=True))
    config.ssd.spdk_bdev_name = "nvme0n1"
    config.ssd.durability.mode = UMBPDurabilityMode.Relaxed
    config.copy_pipeline.worker_threads = 8
    with UMBPClient(config):
        pass
    assert {
        "UMBPConfig.dram.use_shared_memory",
        "UMBPConfig.ssd.spdk_bdev_name",
        "UMBPConfig.ssd.durability.mode",
        "UMBPConfig.copy_pipeline.worker_threads",
    } <= noted_settings()

    with pytest.raises(ConfigError, match=r"standalone-process mode is not implemented"):
        UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE), standalone_process=UMBPStandaloneProcessConfig("x")))
    refused = r"ssd.ssd_backend=.dummy_storage. is not one of file, posix, spdk, spdk_proxy"
    with pytest.raises(ConfigError, match=refused):
        UMBPClient(UMBPConfig(UMBPDramConfig(PAGE, PAGE), ssd=UMBPSsdConfig(ssd_backend="dummy_storage")))
