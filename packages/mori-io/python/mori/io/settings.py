# SPDX-License-Identifier: MIT
"""mori.io's environment variables, declared once with the shared mechanism (:mod:`mori.settings`).

The native core gets values as arguments, so Python is the one reader; ``python -m mori.io env``
(``python -m mori env --package io``) lists them with their effective values. Values are read
when asked for, so a process (or ``mori.settings.override``) may change them before it builds an
engine. MORI_LOG_LEVEL, MORI_NODE_ID and MORI_RDMA_DEVICES are shared: :mod:`mori.settings.shared`.
"""

from __future__ import annotations

import os

from mori.io.errors import ConfigError
from mori.settings import Registry, Setting


def _parse_int(text: str) -> int:
    return int(text, 0)


def _parse_secret(text: str) -> str:
    if text and not 16 <= len(bytes.fromhex(text)) <= 256:  # fromhex's ValueError names bad digits
        raise ValueError("expected 16 to 256 bytes in hex (32 to 512 hex digits)")
    return text


def _parse_poll_mode(text: str) -> str:
    value = text.strip().lower()
    mode = {"0": "polling", "1": "event"}.get(value, value)  # MORI accepts the enum's numbers too
    if mode not in ("polling", "event"):
        raise ValueError("expected polling or event (or 0/1)")
    return mode


REGISTRY = Registry(
    "mori-io",
    (
        Setting(
            "MORI_IO_HOST",
            "string",
            "127.0.0.1",
            "Address the engine listens on when IOEngineConfig.host is empty (loopback unless configured).",
        ),
        Setting(
            "MORI_IO_SECRET",
            "hex",
            "",
            "Job secret (hex) that peers must prove with an HMAC challenge; empty gives each engine a random one. "
            "It travels to peers inside the EngineDesc.",
            parse=_parse_secret,
        ),
        Setting(
            "MORI_IO_CP_TIMEOUT_MS",
            "int",
            "5000",
            "Control-plane deadline: connecting to a peer and the authentication handshake.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_TCP_OP_TIMEOUT_MS",
            "int",
            "30000",
            "Default TcpBackendConfig.op_timeout_ms (a transfer whose peer stays silent this long fails), "
            "and the target's limit on how long one started frame may take to arrive or leave.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_TCP_NUM_DATA_CONNS",
            "int",
            "8",
            "Default TcpBackendConfig.num_data_conns: data connections (lanes) per peer, 1 to 16.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_TCP_CHUNK_BYTES",
            "size",
            "4M",
            "Default TcpBackendConfig.chunk_bytes: largest frame an initiator sends.",
        ),
        Setting(
            "MORI_IO_XGMI_SCATTER_GATHER_THRESHOLD",
            "int",
            "16",
            "Default XgmiBackendConfig.scatter_gather_threshold: a P2P transfer of at least this many separate "
            "runs is copied by one kernel launch (0: one copy-engine call per run, always).",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_XGMI_RUN_KERNEL",
            "bool",
            "1",
            "Default XgmiBackendConfig.run_kernel: a P2P transfer of one contiguous run is copied by mori-io's "
            "kernel, which reports completion through host memory (0: cuMemcpyAsync and an event).",
        ),
        Setting(
            "MORI_IO_XGMI_RESIDENT_BLOCKS",
            "int",
            "0",
            "Default XgmiBackendConfig.resident_blocks: blocks of the resident copier that takes one-run P2P "
            "transfers without a kernel launch each (0: off; the GPU's SM count is a good value).",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_XGMI_RESIDENT_IDLE_US",
            "int",
            "200",
            "Default XgmiBackendConfig.resident_idle_us: how long the resident copier stays without work.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_UCX_LIB_DIR",
            "string",
            "",
            "Directory holding libucp.so.0 (with libucs/libuct) for the RDMA backend; empty: the libucx wheel's "
            "(pip install libucx-cu12) when installed, else the system's UCX.",
        ),
        Setting(
            "MORI_IO_QP_PER_TRANSFER",
            "int",
            "1",
            "Default RdmaBackendConfig.qp_per_transfer: UCP endpoints per remote engine, 1 to 64.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_POST_BATCH_SIZE",
            "int",
            "-1",
            "Default RdmaBackendConfig.post_batch_size: UCX operations a transfer posts per progress pass (-1: 256).",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_POLL_CQ_MODE",
            "choice",
            "polling",
            "Default RdmaBackendConfig.poll_cq_mode: polling (progress briefly after the last event before "
            "sleeping) or event (sleep on UCX's event fd at once).",
            parse=_parse_poll_mode,
        ),
        Setting(
            "MORI_IO_ENABLE_NOTIFICATION",
            "bool",
            "1",
            "Default RdmaBackendConfig.enable_notification: RDMA transfers announce themselves to the target "
            "(pop_inbound_transfer_status) at the cost of one more round trip.",
        ),
        Setting(
            "MORI_IO_MAX_FRAME_BYTES",
            "size",
            "64M",
            "Largest frame payload this engine accepts as a target, 64K to 1G (the bounds initiators clamp "
            "announced limits to); bigger headers close the connection.",
        ),
        Setting(
            "MORI_IO_MAX_SEGMENTS",
            "int",
            "8192",
            "Most (offset, size) segments one frame may carry, 1 to 2^20; as a target an engine accepts at "
            "least 64, the floor initiators clamp announced limits to.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_MAX_CONNECTIONS",
            "int",
            "1024",
            "Most authenticated connections a target serves at once; a peer that proves the secret beyond them "
            "is closed. Connections still in their handshake never count here.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_MAX_PENDING_CONNECTIONS",
            "int",
            "64",
            "Most connections a target keeps in their handshake (not yet authenticated) at once; more are closed "
            "on accept. A failed handshake frees its slot at once.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_HANDSHAKE_TIMEOUT_MS",
            "int",
            "2000",
            "Most time a connection may take to prove the secret before the target closes it.",
            parse=_parse_int,
        ),
        Setting(
            "MORI_IO_MAX_INBOUND_STATUS",
            "int",
            "65536",
            "Most inbound transfer records kept per initiator for pop_inbound_transfer_status (oldest dropped).",
            parse=_parse_int,
        ),
    ),
    error=ConfigError,
)


def raw(name: str) -> str:
    """The effective text of ``name``: its given value, else its default."""
    return REGISTRY.text(name)


# Typed reads, for callers that want an int/str/... rather than get()'s object.
get_int = REGISTRY.get_int
get_str = REGISTRY.get_str
get_bool = REGISTRY.get_bool


def foreign(name: str) -> str | None:
    """Another library's variable that mori.io adapts to but never sets (``UCX_NET_DEVICES``);
    None when unset. Not in the registry: mori.io neither owns nor documents its values."""
    return os.environ.get(name)


def entries() -> list[tuple[str, str, str, str, str]]:
    """(name, type, default, doc, effective value) of every registered variable."""
    return [(s.name, s.kind, s.default_text, s.doc, REGISTRY.text(s.name)) for s in REGISTRY]
