# SPDX-License-Identifier: MIT
"""The one registry of mori.io's environment variables: name, type, default and doc.

Every variable is read here and nowhere else (the native core gets values as arguments), so a
variable has one name, one default and one doc; ``python -m mori.io env`` lists them with their
effective values. Values are read when asked for, so a process may change them before it builds
an engine.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from mori.io.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_LEVELS = ("debug", "info", "warning", "error", "critical")


def _parse_int(text: str) -> int:
    return int(text, 0)


def _parse_size(text: str) -> int:
    match = _SIZE.match(text)
    if match is None:
        raise ValueError("expected bytes such as 4096, 512K, 64M or 1G")
    return int(match.group(1)) << (10 * " kmgt".index((match.group(2) or " ").lower()))


def _parse_level(text: str) -> str:
    if text.lower() not in _LEVELS:
        raise ValueError(f"expected one of {', '.join(_LEVELS)}")
    return text.upper()


def _parse_secret(text: str) -> str:
    if text and not 16 <= len(bytes.fromhex(text)) <= 256:  # fromhex's ValueError names bad digits
        raise ValueError("expected 16 to 256 bytes in hex (32 to 512 hex digits)")
    return text


def _parse_str(text: str) -> str:
    return text


def _parse_bool(text: str) -> int:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return 1
    if value in ("0", "false", "no", "off"):
        return 0
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def _parse_poll_mode(text: str) -> str:
    value = text.strip().lower()
    mode = {"0": "polling", "1": "event"}.get(value, value)  # MORI accepts the enum's numbers too
    if mode not in ("polling", "event"):
        raise ValueError("expected polling or event (or 0/1)")
    return mode


@dataclass(frozen=True, slots=True)
class Setting:
    """One environment variable: its name, type name, default text and meaning."""

    name: str
    kind: str
    default: str
    doc: str
    parse: Callable[[str], object]


REGISTRY: tuple[Setting, ...] = (
    Setting("MORI_IO_HOST", "string", "127.0.0.1",
            "Address the engine listens on when IOEngineConfig.host is empty (loopback unless configured).",
            _parse_str),
    Setting("MORI_IO_SECRET", "hex", "",
            "Job secret (hex) that peers must prove with an HMAC challenge; empty gives each engine a random one. "
            "It travels to peers inside the EngineDesc.", _parse_secret),
    Setting("MORI_IO_CP_TIMEOUT_MS", "int", "5000",
            "Control-plane deadline: connecting to a peer and the authentication handshake.", _parse_int),
    Setting("MORI_IO_TCP_OP_TIMEOUT_MS", "int", "30000",
            "Default TcpBackendConfig.op_timeout_ms (a transfer whose peer stays silent this long fails), "
            "and the target's limit on how long one started frame may take to arrive or leave.",
            _parse_int),
    Setting("MORI_IO_TCP_NUM_DATA_CONNS", "int", "8",
            "Default TcpBackendConfig.num_data_conns: data connections (lanes) per peer, 1 to 16.", _parse_int),
    Setting("MORI_IO_TCP_CHUNK_BYTES", "size", "4M",
            "Default TcpBackendConfig.chunk_bytes: largest frame an initiator sends.", _parse_size),
    Setting("MORI_IO_XGMI_SCATTER_GATHER_THRESHOLD", "int", "16",
            "Default XgmiBackendConfig.scatter_gather_threshold: a P2P transfer of at least this many separate "
            "runs is copied by one kernel launch (0: one copy-engine call per run, always).", _parse_int),
    Setting("MORI_IO_XGMI_RUN_KERNEL", "bool", "1",
            "Default XgmiBackendConfig.run_kernel: a P2P transfer of one contiguous run is copied by mori-io's "
            "kernel, which reports completion through host memory (0: cuMemcpyAsync and an event).", _parse_bool),
    Setting("MORI_IO_XGMI_RESIDENT_BLOCKS", "int", "0",
            "Default XgmiBackendConfig.resident_blocks: blocks of the resident copier that takes one-run P2P "
            "transfers without a kernel launch each (0: off; the GPU's SM count is a good value).", _parse_int),
    Setting("MORI_IO_XGMI_RESIDENT_IDLE_US", "int", "200",
            "Default XgmiBackendConfig.resident_idle_us: how long the resident copier stays without work.",
            _parse_int),
    Setting("MORI_IO_UCX_LIB_DIR", "string", "",
            "Directory holding libucp.so.0 (with libucs/libuct) for the RDMA backend; empty: the libucx wheel's "
            "(pip install libucx-cu12) when installed, else the system's UCX.", _parse_str),
    Setting("MORI_IO_QP_PER_TRANSFER", "int", "1",
            "Default RdmaBackendConfig.qp_per_transfer: UCP endpoints per remote engine, 1 to 64.", _parse_int),
    Setting("MORI_IO_POST_BATCH_SIZE", "int", "-1",
            "Default RdmaBackendConfig.post_batch_size: UCX operations a transfer posts per progress pass "
            "(-1: 256).", _parse_int),
    Setting("MORI_IO_POLL_CQ_MODE", "choice", "polling",
            "Default RdmaBackendConfig.poll_cq_mode: polling (progress briefly after the last event before "
            "sleeping) or event (sleep on UCX's event fd at once).", _parse_poll_mode),
    Setting("MORI_IO_ENABLE_NOTIFICATION", "bool", "1",
            "Default RdmaBackendConfig.enable_notification: RDMA transfers announce themselves to the target "
            "(pop_inbound_transfer_status) at the cost of one more round trip.", _parse_bool),
    Setting("MORI_IO_MAX_FRAME_BYTES", "size", "64M",
            "Largest frame payload this engine accepts as a target, 64K to 1G (the bounds initiators clamp "
            "announced limits to); bigger headers close the connection.", _parse_size),
    Setting("MORI_IO_MAX_SEGMENTS", "int", "8192",
            "Most (offset, size) segments one frame may carry, 1 to 2^20; as a target an engine accepts at "
            "least 64, the floor initiators clamp announced limits to.", _parse_int),
    Setting("MORI_IO_MAX_CONNECTIONS", "int", "1024",
            "Most authenticated connections a target serves at once; a peer that proves the secret beyond them "
            "is closed. Connections still in their handshake never count here.", _parse_int),
    Setting("MORI_IO_MAX_PENDING_CONNECTIONS", "int", "64",
            "Most connections a target keeps in their handshake (not yet authenticated) at once; more are closed "
            "on accept. A failed handshake frees its slot at once.", _parse_int),
    Setting("MORI_IO_HANDSHAKE_TIMEOUT_MS", "int", "2000",
            "Most time a connection may take to prove the secret before the target closes it.", _parse_int),
    Setting("MORI_IO_MAX_INBOUND_STATUS", "int", "65536",
            "Most inbound transfer records kept per initiator for pop_inbound_transfer_status (oldest dropped).",
            _parse_int),
    Setting("MORI_RDMA_DEVICES", "string", "",
            "MORI's NIC selection for the RDMA backend: 'mlx5_0,mlx5_1' uses only these devices, '^mlx5_2' all but "
            "these. Passed to the engine's UCX context as its NET_DEVICES (an InfiniBand device without a port "
            "stands for each of its ports); network interfaces (lo, eth0) are passed as named. Empty: all devices, "
            "or only lo for an engine listening on loopback.", _parse_str),
    Setting("MORI_NODE_ID", "string", "", "Node identity in EngineDesc.node_id; empty uses the kernel boot id.",
            _parse_str),
    Setting("MORI_LOG_LEVEL", "choice", "WARNING", "Log level of mori.io's Python and native code.", _parse_level),
)  # fmt: skip

_BY_NAME = {s.name: s for s in REGISTRY}


def raw(name: str) -> str:
    """The effective text of ``name``: its value if set and non-empty, else its default."""
    setting = _BY_NAME.get(name)
    if setting is None:
        raise KeyError(f"{name} is not a registered mori.io environment variable")
    return os.environ.get(name) or setting.default


def _get(name: str) -> object:
    text = raw(name)
    try:
        return _BY_NAME[name].parse(text)
    except ValueError as exc:
        raise ConfigError(f"{name}={text!r} does not parse as {_BY_NAME[name].kind}: {exc}") from None


def get_int(name: str) -> int:
    value = _get(name)
    assert isinstance(value, int)
    return value


def get_str(name: str) -> str:
    value = _get(name)
    assert isinstance(value, str)
    return value


def get_bool(name: str) -> bool:
    return bool(get_int(name))


def foreign(name: str) -> str | None:
    """Another library's variable that mori.io adapts to but never sets (``UCX_NET_DEVICES``);
    None when unset. Not in the registry: mori.io neither owns nor documents its values."""
    return os.environ.get(name)


def entries() -> list[tuple[str, str, str, str, str]]:
    """(name, type, default, doc, effective value) of every registered variable."""
    return [(s.name, s.kind, s.default, s.doc, raw(s.name)) for s in REGISTRY]
