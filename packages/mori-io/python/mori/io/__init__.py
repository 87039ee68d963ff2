# SPDX-License-Identifier: MIT
"""mori.io: point-to-point transfer engine for KV-cache movement (MORI's ``mori.io`` API).

``IOEngine`` registers host or GPU memory, learns peers from their ``EngineDesc`` and moves bytes
with one-sided ``read``/``write`` and batches over its TCP backend (native C++ IO threads; GPU
memory staged through pinned buffers), its RDMA backend (``BackendType.RDMA``, through UCX, opened
at run time from the ``libucx`` wheel or the system) or, between GPUs of one host, its P2P backend
(``BackendType.XGMI``, CUDA IPC), reporting through ``TransferStatus``. Stand-alone: it does not
need mori-shmem or torch, needs the CUDA driver only for GPU memory and UCX only for RDMA.
"""

from __future__ import annotations

import logging

from mori._version import distribution_version
from mori.io._native import _C, set_log_level
from mori.io.config import (
    FabricBackendConfig,
    IOEngineConfig,
    RdmaBackendConfig,
    TcpBackendConfig,
    XgmiBackendConfig,
)
from mori.io.descriptors import EngineDesc, MemoryDesc
from mori.io.engine import IOEngine
from mori.io.errors import (
    AuthenticationError,
    ConfigError,
    ConnectionFailedError,
    DescriptorError,
    EngineClosedError,
    InternalError,
    InvalidArgumentError,
    MoriIoError,
    NotFoundError,
    ProtocolError,
    SystemCallError,
    TransferTimeoutError,
    UnsupportedError,
)
from mori.io.session import IOEngineSession

__version__ = distribution_version("mori-io")

logging.getLogger(__name__).addHandler(logging.NullHandler())

BackendType = _C.BackendType
MemoryLocationType = _C.MemoryLocationType
PollCqMode = _C.PollCqMode
StatusCode = _C.StatusCode
TransferStatus = _C.TransferStatus

__all__ = [
    "AuthenticationError",
    "BackendType",
    "ConfigError",
    "ConnectionFailedError",
    "DescriptorError",
    "EngineClosedError",
    "EngineDesc",
    "FabricBackendConfig",
    "IOEngine",
    "IOEngineConfig",
    "IOEngineSession",
    "InternalError",
    "InvalidArgumentError",
    "MemoryDesc",
    "MemoryLocationType",
    "MoriIoError",
    "NotFoundError",
    "PollCqMode",
    "ProtocolError",
    "RdmaBackendConfig",
    "StatusCode",
    "SystemCallError",
    "TcpBackendConfig",
    "TransferStatus",
    "TransferTimeoutError",
    "UnsupportedError",
    "XgmiBackendConfig",
    "__version__",
    "set_log_level",
]
