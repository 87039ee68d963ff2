# SPDX-License-Identifier: MIT
"""mori.umbp: a tiered, distributed KV-block pool (MORI's UMBP) whose data plane is mori-io.

A master (``mori-umbp-master``, gRPC) keeps the node registry and the block index, routes puts
and gets, grants leases and evicts by watermark LRU; every ``UMBPClient`` is a peer that owns
pages in its DRAM tier and moves bytes peer to peer with mori-io.
"""

from __future__ import annotations

import logging

from mori.umbp.client.config import (
    UMBPConfig,
    UMBPDeploymentMode,
    UMBPDistributedConfig,
    UMBPDramConfig,
    UMBPEvictionConfig,
    UMBPMasterClientConfig,
    UMBPSsdConfig,
)
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch, UMBPExternalKvNodeMatch
from mori.umbp.client.master_client import UMBPMasterClient
from mori.umbp.client.pool_client import UMBPClient
from mori.umbp.errors import (
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    InvalidKeyError,
    MasterUnavailableError,
    MetadataStoreError,
    PeerUnavailableError,
    TierCapacityError,
    UMBPError,
    UnknownTierError,
    ValueTooLargeError,
)
from mori.umbp.master.server import MasterServer, MasterServerConfig
from mori.umbp.types import UMBPTierType

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

#: MORI's name for the distributed-mode client.
PoolClient = UMBPClient

__all__ = [
    "ClosedError",
    "ConfigError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "MasterServer",
    "MasterServerConfig",
    "MasterUnavailableError",
    "MetadataStoreError",
    "PeerUnavailableError",
    "PoolClient",
    "TierCapacityError",
    "UMBPClient",
    "UMBPConfig",
    "UMBPDeploymentMode",
    "UMBPDistributedConfig",
    "UMBPDramConfig",
    "UMBPError",
    "UMBPEvictionConfig",
    "UMBPExternalKvHitCountEntry",
    "UMBPExternalKvMatch",
    "UMBPExternalKvNodeMatch",
    "UMBPMasterClient",
    "UMBPMasterClientConfig",
    "UMBPSsdConfig",
    "UMBPTierType",
    "UnknownTierError",
    "ValueTooLargeError",
    "__version__",
]
