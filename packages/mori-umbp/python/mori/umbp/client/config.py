# SPDX-License-Identifier: MIT
"""``UMBPConfig`` and its parts, with MORI's field names; ``from_environment()`` reads the registry."""

from __future__ import annotations

import enum
import socket
import uuid
from dataclasses import dataclass, field

from mori.umbp import settings


class UMBPDeploymentMode(enum.IntEnum):
    Local = 0
    StandaloneProcess = 1
    Distributed = 2


@dataclass
class UMBPMasterClientConfig:
    master_address: str = ""
    node_id: str = ""
    node_address: str = ""
    auto_heartbeat: bool = True
    tags: list[str] = field(default_factory=list)
    #: The pool secret (16 to 256 bytes); None: UMBP_POOL_SECRET, else the master's secret file on
    #: this host (NOTE [pool authentication] in mori.umbp.auth).
    pool_secret: bytes | None = field(default=None, repr=False)


@dataclass
class UMBPDramConfig:
    """The host-memory tier. The watermarks drive the local mode's own eviction; in distributed mode
    the master evicts DRAM by UMBP_DRAM_HIGH_WM / UMBP_DRAM_LOW_WM."""

    capacity_bytes: int = 4 << 30
    page_size: int = 2 << 20
    high_watermark: float = 0.9
    low_watermark: float = 0.7


@dataclass
class UMBPHbmConfig:
    """The GPU tier of a distributed node: ``capacity_bytes`` of one CUDA tensor on ``device_id``
    (the CUDA ordinal this process sees), cut into pages and registered with mori-io. 0 (the
    default) owns no HBM; more needs torch with CUDA, else TierUnavailableError."""

    capacity_bytes: int = 0
    page_size: int = 2 << 20
    device_id: int = 0


@dataclass
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


@dataclass
class UMBPEvictionConfig:
    """Local eviction (the local mode's DRAM and SSD tiers, a distributed peer's SSD tier): ``lru``
    or ``prefix_aware_lru``. ``auto_promote_on_read``: the local mode copies an SSD hit back into
    DRAM."""

    policy: str = "lru"
    candidate_window: int = 16
    auto_promote_on_read: bool = True


@dataclass
class UMBPDistributedConfig:
    master_config: UMBPMasterClientConfig = field(default_factory=UMBPMasterClientConfig)
    peer_service_port: int = 0
    staging_buffer_size: int = 64 << 20
    #: SSD reads by remote peers are staged in this registered buffer, cut into equal slots; a
    #: block larger than one slot stays DRAM-only (it could not be read back remotely).
    ssd_staging_buffer_size: int = 64 << 20
    ssd_staging_buffer_slots: int = 16


@dataclass
class UMBPConfig:
    """MORI's config tree. ``distributed`` None (the default) makes ``UMBPClient`` the in-process
    local mode (DRAM + optional SSD); set, a node of a distributed pool."""

    dram: UMBPDramConfig = field(default_factory=UMBPDramConfig)
    distributed: UMBPDistributedConfig | None = None
    ssd: UMBPSsdConfig = field(default_factory=UMBPSsdConfig)
    eviction: UMBPEvictionConfig = field(default_factory=UMBPEvictionConfig)
    hbm: UMBPHbmConfig = field(default_factory=UMBPHbmConfig)

    @classmethod
    def from_environment(cls, node_id: str = "", distributed: bool = True) -> UMBPConfig:
        """A config from UMBP_* variables: distributed (``node_id`` defaults to host-random), or the
        local mode with ``distributed=False``."""
        g = settings
        master = UMBPMasterClientConfig(
            master_address=g.get_str("UMBP_MASTER_ADDRESS"),
            node_id=node_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}",
            node_address=g.get_str("UMBP_NODE_ADDRESS"),
        )
        return cls(
            dram=UMBPDramConfig(
                g.get_int("UMBP_DRAM_CAPACITY"),
                g.get_int("UMBP_DRAM_PAGE_SIZE"),
                g.get_float("UMBP_DRAM_HIGH_WM"),
                g.get_float("UMBP_DRAM_LOW_WM"),
            ),
            distributed=UMBPDistributedConfig(
                master,
                g.get_int("UMBP_PEER_SERVICE_PORT"),
                g.get_int("UMBP_DISTRIBUTED_STAGING_BUFFER_SIZE"),
                g.get_int("UMBP_SSD_STAGING_BYTES"),
            )
            if distributed
            else None,
            ssd=UMBPSsdConfig(
                g.get_bool("UMBP_SSD_ENABLED"),
                g.get_str("UMBP_SSD_DIR"),
                g.get_int("UMBP_SSD_CAPACITY"),
                g.get_float("UMBP_SSD_HIGH_WM"),
                g.get_float("UMBP_SSD_LOW_WM"),
                g.get_bool("UMBP_SSD_RECOVER"),
            ),
            eviction=UMBPEvictionConfig(
                g.get_str("UMBP_EVICTION_POLICY"), auto_promote_on_read=g.get_bool("UMBP_AUTO_PROMOTE_ON_READ")
            ),
            hbm=UMBPHbmConfig(
                g.get_int("UMBP_HBM_CAPACITY"), g.get_int("UMBP_HBM_PAGE_SIZE"), g.get_int("UMBP_HBM_DEVICE")
            ),
        )
