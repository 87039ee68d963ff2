# SPDX-License-Identifier: MIT
"""``UMBPConfig`` and its parts, with MORI's field names and defaults; ``from_environment()`` reads
the registry. The classes are slotted, so a misspelt (or unknown) field raises AttributeError
instead of being silently kept. Fields MORI has that do nothing here are listed, with the reason,
in docs/user-guide/compatibility.md and logged once when set (``client/inert.py``)."""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass, field

from mori.umbp import settings
from mori.umbp.client.config_enums import (
    CacheRemoteAdmission,
    UMBPDeploymentMode,
    UMBPDurabilityMode,
    UMBPIoBackend,
    UMBPRole,
    UMBPSsdLayoutMode,
)

__all__ = [
    "CacheRemoteAdmission",
    "UMBPConfig",
    "UMBPCopyPipelineConfig",
    "UMBPDeploymentMode",
    "UMBPDistributedConfig",
    "UMBPDramConfig",
    "UMBPDurabilityConfig",
    "UMBPDurabilityMode",
    "UMBPEvictionConfig",
    "UMBPHbmConfig",
    "UMBPIoBackend",
    "UMBPIoConfig",
    "UMBPIoEngineConfig",
    "UMBPMasterClientConfig",
    "UMBPRole",
    "UMBPSsdConfig",
    "UMBPSsdLayoutMode",
    "UMBPStandaloneProcessConfig",
]

MiB = 1 << 20


@dataclass(slots=True)
class UMBPMasterClientConfig:
    master_address: str = ""
    node_id: str = ""
    node_address: str = ""
    auto_heartbeat: bool = True
    tags: list[str] = field(default_factory=list)
    #: The pool secret (16 to 256 bytes); None: UMBP_POOL_SECRET, else the master's secret file on
    #: this host (NOTE [pool authentication] in mori.umbp.auth).
    pool_secret: bytes | None = field(default=None, repr=False)


@dataclass(slots=True)
class UMBPDramConfig:
    """The host-memory tier. The watermarks drive the local mode's own eviction; in distributed mode
    a peer evicts on demand down to UMBP_DRAM_HIGH_WM and the master's timed pass evicts by
    UMBP_DRAM_HIGH_WM / UMBP_DRAM_LOW_WM."""

    capacity_bytes: int = 4 << 30
    #: The distributed tier's page (a block takes whole pages; ``distributed.dram_page_size``
    #: overrides it there); the local mode packs blocks within pages.
    page_size: int = 2 << 20
    high_watermark: float = 0.9
    low_watermark: float = 0.7
    use_shared_memory: bool = False
    shm_name: str = "/umbp_dram"
    #: The tier's memory comes from UMBPHostMemAllocator: hugetlb pages of ``hugepage_size``
    #: (normal pages when none are reserved), bound to ``numa_node`` (-1: unbound), prefaulted.
    use_hugepages: bool = False
    hugepage_size: int = 2 << 20
    numa_node: int = -1
    prefault: bool = True


@dataclass(slots=True)
class UMBPHbmConfig:
    """The GPU tier of a distributed node: ``capacity_bytes`` of one CUDA tensor on ``device_id``
    (the CUDA ordinal this process sees), cut into pages and registered with mori-io. 0 (the
    default) owns no HBM; more needs torch with CUDA, else TierUnavailableError."""

    capacity_bytes: int = 0
    page_size: int = 2 << 20
    device_id: int = 0


@dataclass(slots=True)
class UMBPIoConfig:
    backend: UMBPIoBackend = UMBPIoBackend.IoUring
    queue_depth: int = 4096


@dataclass(slots=True)
class UMBPDurabilityConfig:
    mode: UMBPDurabilityMode = UMBPDurabilityMode.Strict
    enable_background_gc: bool = True


@dataclass(slots=True)
class UMBPSsdConfig:
    """The SSD tier. Off by default here (MORI's default is on, in /tmp/umbp_ssd): each distributed
    node writes under ``storage_dir``/<node id>, so nodes may share one directory; the local mode
    writes in ``storage_dir`` itself."""

    enabled: bool = False
    storage_dir: str = "/tmp/umbp_ssd"
    capacity_bytes: int = 32 << 30
    high_watermark: float = 0.9
    low_watermark: float = 0.7
    #: Re-discover the committed blocks of a previous run (torn files are discarded); False deletes them.
    recover: bool = True
    layout_mode: UMBPSsdLayoutMode = UMBPSsdLayoutMode.SegmentedLog
    segment_size_bytes: int = 256 * MiB
    io: UMBPIoConfig = field(default_factory=UMBPIoConfig)
    durability: UMBPDurabilityConfig = field(default_factory=UMBPDurabilityConfig)
    #: ``file`` (block files; ``posix``, its older name, too); ``spdk`` / ``spdk_proxy`` are accepted and
    #: stored as files.
    ssd_backend: str = "file"
    spdk_bdev_name: str = ""
    spdk_reactor_mask: str = "0x1"
    spdk_mem_size_mb: int = 256
    spdk_nvme_pci_addr: str = ""
    spdk_nvme_ctrl_name: str = "NVMe0"
    spdk_io_workers: int = 4
    spdk_proxy_shm_name: str = "/umbp_spdk_proxy"
    spdk_proxy_bin: str = ""
    spdk_proxy_tenant_id: int = 0
    spdk_proxy_tenant_quota_bytes: int = 0
    spdk_proxy_max_channels: int = 8
    spdk_proxy_data_per_channel_mb: int = 32
    spdk_proxy_startup_timeout_ms: int = 30000
    spdk_proxy_auto_start: bool = True
    spdk_proxy_idle_exit_timeout_ms: int = 30000
    spdk_proxy_allow_borrow: bool = False
    spdk_proxy_reserved_shared_bytes: int = 0


@dataclass(slots=True)
class UMBPEvictionConfig:
    """Local eviction (the local mode's DRAM and SSD tiers, a distributed peer's SSD tier and its
    on-demand eviction of HBM and DRAM): ``lru``, ``prefix_aware_lru`` or ``segmented_lru`` (NOTE
    [segmented LRU] in mori.umbp.peer.lru; mori-umbp's own).
    ``auto_promote_on_read``: the local mode copies an SSD hit back into DRAM."""

    policy: str = "lru"
    candidate_window: int = 16
    auto_promote_on_read: bool = True


@dataclass(slots=True)
class UMBPIoEngineConfig:
    """Where this node's mori-io engine listens: ``host`` "" binds it where the peer service is
    reachable (``master_config.node_address``); ``port`` 0 picks a free port."""

    host: str = ""
    port: int = 0


@dataclass(slots=True)
class UMBPCopyPipelineConfig:
    async_enabled: bool = True
    queue_depth: int = 4096
    worker_threads: int = 2
    batch_max_ops: int = 128


@dataclass(slots=True)
class UMBPStandaloneProcessConfig:
    """MORI's standalone-process mode (a worker of a UMBP server process); not implemented here:
    a config that sets ``UMBPConfig.standalone_process`` is refused with ConfigError."""

    address: str = ""
    auto_start: bool = False
    startup_timeout_ms: int = 30000
    worker_node_id: str = ""
    worker_node_address: str = ""
    tags: list[str] = field(default_factory=list)


@dataclass(slots=True)
class UMBPDistributedConfig:
    master_config: UMBPMasterClientConfig = field(default_factory=UMBPMasterClientConfig)
    io_engine: UMBPIoEngineConfig = field(default_factory=UMBPIoEngineConfig)
    peer_service_port: int = 0
    staging_buffer_size: int = 64 << 20
    #: SSD reads by remote peers are staged in this registered buffer, cut into equal slots; a
    #: block larger than one slot stays DRAM-only (it could not be read back remotely).
    ssd_staging_buffer_size: int = 64 << 20
    ssd_staging_buffer_slots: int = 16
    cache_remote_fetches: bool = True
    cache_remote_admission: CacheRemoteAdmission = CacheRemoteAdmission.SIZE
    admission_max_block_bytes: int = 16 * MiB
    #: The DRAM tier's page size on this node; 0 (MORI's default) keeps ``dram.page_size``.
    dram_page_size: int = 0


@dataclass(slots=True)
class UMBPConfig:
    """MORI's config tree. ``distributed`` None (the default) makes ``UMBPClient`` the in-process
    local mode (DRAM + optional SSD); set, a node of a distributed pool."""

    dram: UMBPDramConfig = field(default_factory=UMBPDramConfig)
    distributed: UMBPDistributedConfig | None = None
    ssd: UMBPSsdConfig = field(default_factory=UMBPSsdConfig)
    eviction: UMBPEvictionConfig = field(default_factory=UMBPEvictionConfig)
    hbm: UMBPHbmConfig = field(default_factory=UMBPHbmConfig)
    copy_pipeline: UMBPCopyPipelineConfig = field(default_factory=UMBPCopyPipelineConfig)
    role: UMBPRole = UMBPRole.Standalone
    follower_mode: bool = False
    force_ssd_copy_on_write: bool = False
    standalone_process: UMBPStandaloneProcessConfig | None = None

    @classmethod
    def from_environment(cls, node_id: str = "", distributed: bool = False) -> UMBPConfig:
        """A config from the UMBP_* variables, as MORI's ``UMBPConfig.from_environment()``: the local
        mode (``distributed`` None: MORI reads no distributed settings here), ``ssd.ssd_backend`` and
        the ``ssd.spdk_*`` fields, and the role (UMBP_ROLE, else from the launcher's local rank).
        ``distributed=True`` (an addition) also fills ``distributed`` from UMBP_MASTER_ADDRESS and
        the node's variables, ``node_id`` defaulting to host-random."""
        g = settings
        ssd = UMBPSsdConfig(
            g.get_bool("UMBP_SSD_ENABLED"),
            g.get_str("UMBP_SSD_DIR"),
            g.get_int("UMBP_SSD_CAPACITY"),
            g.get_float("UMBP_SSD_HIGH_WM"),
            g.get_float("UMBP_SSD_LOW_WM"),
            g.get_bool("UMBP_SSD_RECOVER"),
            ssd_backend=g.get_str("UMBP_SSD_BACKEND"),
        )
        if not g.is_set("UMBP_SSD_BACKEND") and g.get_str("UMBP_SPDK_NVME_PCI"):
            ssd.ssd_backend = "spdk"  # MORI: a PCI address alone selects SPDK
        for name, field_name in _SPDK_ENVIRONMENT:
            setattr(ssd, field_name, g.get(name))
        if not g.is_set("UMBP_SPDK_PROXY_MAX_CHANNELS") and g.is_set("UMBP_SPDK_PROXY_MAX_RANKS"):
            ssd.spdk_proxy_max_channels = g.get_int("UMBP_SPDK_PROXY_MAX_RANKS")
        if not g.is_set("UMBP_SPDK_PROXY_DATA_PER_CHANNEL_MB") and g.is_set("UMBP_SPDK_PROXY_DATA_MB"):
            ssd.spdk_proxy_data_per_channel_mb = g.get_int("UMBP_SPDK_PROXY_DATA_MB")
        dist = None
        if distributed:
            master = UMBPMasterClientConfig(
                master_address=g.get_str("UMBP_MASTER_ADDRESS"),
                node_id=node_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
                node_address=g.get_str("UMBP_NODE_ADDRESS"),
            )
            dist = UMBPDistributedConfig(
                master,
                UMBPIoEngineConfig(g.get_str("UMBP_IO_ENGINE_HOST"), g.get_int("UMBP_IO_ENGINE_PORT")),
                g.get_int("UMBP_PEER_SERVICE_PORT"),
                g.get_int("UMBP_DISTRIBUTED_STAGING_BUFFER_SIZE"),
                g.get_int("UMBP_SSD_STAGING_BYTES"),
            )
        return cls(
            dram=UMBPDramConfig(
                g.get_int("UMBP_DRAM_CAPACITY"),
                g.get_int("UMBP_DRAM_PAGE_SIZE"),
                g.get_float("UMBP_DRAM_HIGH_WM"),
                g.get_float("UMBP_DRAM_LOW_WM"),
                use_hugepages=g.get_bool("UMBP_DRAM_USE_HUGEPAGES"),
                hugepage_size=g.get_int("UMBP_DRAM_HUGEPAGE_SIZE"),
                numa_node=g.get_int("UMBP_DRAM_NUMA_NODE"),
                prefault=g.get_bool("UMBP_DRAM_PREFAULT"),
            ),
            distributed=dist,
            ssd=ssd,
            eviction=UMBPEvictionConfig(
                g.get_str("UMBP_EVICTION_POLICY"), auto_promote_on_read=g.get_bool("UMBP_AUTO_PROMOTE_ON_READ")
            ),
            hbm=UMBPHbmConfig(
                g.get_int("UMBP_HBM_CAPACITY"), g.get_int("UMBP_HBM_PAGE_SIZE"), g.get_int("UMBP_HBM_DEVICE")
            ),
            role=_role_from_environment(),
        )

    def resolve_role(self) -> UMBPRole:
        """MORI's ResolveRole: ``role`` when set, else ``follower_mode`` / ``force_ssd_copy_on_write``
        (MORI's older switches for follower and leader)."""
        if self.role != UMBPRole.Standalone:
            return self.role
        if self.follower_mode:
            return UMBPRole.SharedSSDFollower
        if self.force_ssd_copy_on_write:
            return UMBPRole.SharedSSDLeader
        return UMBPRole.Standalone


def _role_from_environment() -> UMBPRole:
    named = settings.get_str("UMBP_ROLE")
    if named:
        return {"leader": UMBPRole.SharedSSDLeader, "follower": UMBPRole.SharedSSDFollower}.get(
            named, UMBPRole.Standalone
        )
    rank = settings.launcher_local_rank()
    if rank is None:
        return UMBPRole.Standalone
    return UMBPRole.SharedSSDLeader if rank == 0 else UMBPRole.SharedSSDFollower


#: (variable, UMBPSsdConfig field) that from_environment() reads as MORI does.
_SPDK_ENVIRONMENT = (
    ("UMBP_SPDK_BDEV", "spdk_bdev_name"),
    ("UMBP_SPDK_REACTOR_MASK", "spdk_reactor_mask"),
    ("UMBP_SPDK_MEM_MB", "spdk_mem_size_mb"),
    ("UMBP_SPDK_NVME_PCI", "spdk_nvme_pci_addr"),
    ("UMBP_SPDK_NVME_CTRL", "spdk_nvme_ctrl_name"),
    ("UMBP_SPDK_IO_WORKERS", "spdk_io_workers"),
    ("UMBP_SPDK_PROXY_SHM", "spdk_proxy_shm_name"),
    ("UMBP_SPDK_PROXY_TENANT_ID", "spdk_proxy_tenant_id"),
    ("UMBP_SPDK_PROXY_TENANT_QUOTA_BYTES", "spdk_proxy_tenant_quota_bytes"),
    ("UMBP_SPDK_PROXY_MAX_CHANNELS", "spdk_proxy_max_channels"),
    ("UMBP_SPDK_PROXY_DATA_PER_CHANNEL_MB", "spdk_proxy_data_per_channel_mb"),
    ("UMBP_SPDK_PROXY_BIN", "spdk_proxy_bin"),
    ("UMBP_SPDK_PROXY_TIMEOUT_MS", "spdk_proxy_startup_timeout_ms"),
    ("UMBP_SPDK_PROXY_AUTO_START", "spdk_proxy_auto_start"),
    ("UMBP_SPDK_PROXY_IDLE_EXIT_TIMEOUT_MS", "spdk_proxy_idle_exit_timeout_ms"),
    ("UMBP_SPDK_PROXY_ALLOW_BORROW", "spdk_proxy_allow_borrow"),
    ("UMBP_SPDK_PROXY_RESERVED_SHARED_BYTES", "spdk_proxy_reserved_shared_bytes"),
)

#: Older MORI releases kept these on UMBPConfig itself (``cfg.ssd_backend``, ``cfg.spdk_*``; SGLang's
#: UMBPStore of that time sets them there); they are properties reading and writing ``cfg.ssd``'s
#: fields of the same name, so both spellings reach one setting.
TOP_LEVEL_SSD_ALIASES = tuple(
    name for name in UMBPSsdConfig.__dataclass_fields__ if name == "ssd_backend" or name.startswith("spdk_")
)


def _ssd_alias(name: str) -> property:
    def read(config: UMBPConfig) -> object:
        return getattr(config.ssd, name)

    def write(config: UMBPConfig, value: object) -> None:
        setattr(config.ssd, name, value)

    return property(read, write, doc=f"Alias of ``ssd.{name}`` (MORI's older top-level field).")


for _name in TOP_LEVEL_SSD_ALIASES:
    setattr(UMBPConfig, _name, _ssd_alias(_name))
