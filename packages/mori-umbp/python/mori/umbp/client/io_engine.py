# SPDX-License-Identifier: MIT
"""Where a distributed node's mori-io engine listens (MORI's ``distributed.io_engine``).

MORI's PoolClient creates its IO engine only when ``io_engine.host`` is set: with the default ""
a MORI node has no data plane to other nodes, and the host SGLang passes is the node address. A
node here always owns registered pages that peers write into, so "" binds the engine at the node
address (where MORI advertises the peer service in that case too); a set host and port are used
as given (port 0: a free one).
"""

from __future__ import annotations

from mori.io import IOEngineConfig
from mori.umbp.client.config import UMBPIoEngineConfig
from mori.umbp.errors import ConfigError


def engine_config(io_engine: UMBPIoEngineConfig, node_address: str) -> IOEngineConfig:
    port = io_engine.port
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"distributed.io_engine.port={port!r} must be an int in [0, 65535] (0: a free port)")
    if not isinstance(io_engine.host, str):
        raise ConfigError(f"distributed.io_engine.host={io_engine.host!r} must be a str ('' : the node address)")
    return IOEngineConfig(host=io_engine.host or node_address, port=port)
