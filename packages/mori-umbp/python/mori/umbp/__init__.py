# SPDX-License-Identifier: MIT
"""mori.umbp: a tiered, distributed KV-block pool (MORI's UMBP) whose data plane is mori-io.

A master (``mori-umbp-master``, gRPC) keeps the node registry and the block index, routes puts
and gets, grants leases and evicts by watermark LRU; every distributed ``UMBPClient`` is a peer
that owns pages in its HBM and DRAM tiers (and block files in an SSD tier) and moves bytes peer to
peer with mori-io. Without ``UMBPConfig.distributed``, ``UMBPClient`` is the in-process local mode.
"""

from __future__ import annotations

import logging

from mori._version import distribution_version
from mori.umbp.client import config as _config
from mori.umbp.client.base import UMBPClient
from mori.umbp.client.config import *  # noqa: F403  (UMBPConfig and its parts; config.__all__ lists them once)
from mori.umbp.client.external_kv import UMBPExternalKvHitCountEntry, UMBPExternalKvMatch, UMBPExternalKvNodeMatch
from mori.umbp.client.local_client import LocalClient
from mori.umbp.client.master_client import UMBPMasterClient
from mori.umbp.client.pool_client import DistributedClient
from mori.umbp.errors import (
    AuthenticationError,
    ClosedError,
    ConfigError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidNodeIdError,
    MasterUnavailableError,
    MetadataStoreError,
    NoRoomError,
    PeerUnavailableError,
    PendingLimitError,
    TierCapacityError,
    TierUnavailableError,
    UMBPError,
    UnknownTierError,
    ValueTooLargeError,
)
from mori.umbp.hostmem import UMBPHostBufferBacking, UMBPHostBufferHandle, UMBPHostMemAllocator
from mori.umbp.master.server import MasterServer, MasterServerConfig
from mori.umbp.types import UMBPTierType

__version__ = distribution_version("mori-umbp")

logging.getLogger(__name__).addHandler(logging.NullHandler())

#: MORI's names for the clients of the two modes (``UMBPClient(config)`` picks one).
PoolClient = DistributedClient
StandaloneClient = LocalClient

__all__ = [
    "AuthenticationError",
    "ClosedError",
    "ConfigError",
    "DistributedClient",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidNodeIdError",
    "LocalClient",
    "MasterServer",
    "MasterServerConfig",
    "MasterUnavailableError",
    "MetadataStoreError",
    "NoRoomError",
    "PeerUnavailableError",
    "PendingLimitError",
    "PoolClient",
    "StandaloneClient",
    "TierCapacityError",
    "TierUnavailableError",
    "UMBPClient",
    "UMBPError",
    "UMBPExternalKvHitCountEntry",
    "UMBPExternalKvMatch",
    "UMBPExternalKvNodeMatch",
    "UMBPHostBufferBacking",
    "UMBPHostBufferHandle",
    "UMBPHostMemAllocator",
    "UMBPMasterClient",
    "UMBPTierType",
    "UnknownTierError",
    "ValueTooLargeError",
    "__version__",
    *_config.__all__,
]
