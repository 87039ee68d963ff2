# SPDX-License-Identifier: MIT
"""Engine and backend configurations with MORI's names, fields and defaults.

This build has the TCP backend (host and GPU memory) and the P2P backend for GPU memory of engines
on one host, under MORI's name ``BackendType.XGMI`` with ``XgmiBackendConfig``. The RDMA and
FABRIC configs are accepted so that code written for MORI constructs them unchanged, and
``create_backend`` refuses those types with ``UnsupportedError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mori.io import settings
from mori.io._native import _C
from mori.io.errors import InvalidArgumentError, check_int

#: TcpBackendConfig.num_data_conns bounds (MORI's TCP backend: [1, 16]).
MAX_DATA_CONNS = 16


@dataclass
class IOEngineConfig:
    """Where the engine's control plane listens, and the secret peers must prove.

    ``host=""`` listens on MORI_IO_HOST (loopback by default); ``port=0`` binds a free port, which
    ``get_engine_desc().port`` then reports. ``secret=None`` takes MORI_IO_SECRET, or a random one.
    """

    host: str = ""
    port: int = 0
    secret: bytes | None = field(default=None, repr=False)


@dataclass
class TcpBackendConfig:
    """MORI's TCP backend knobs (same names and defaults), plus ``min_stripe_bytes`` (smallest
    piece a striped transfer is cut into) and ``chunk_bytes`` (largest frame sent)."""

    sock_sndbuf_bytes: int = 32 * 1024 * 1024
    sock_rcvbuf_bytes: int = 32 * 1024 * 1024
    op_timeout_ms: int = field(default_factory=lambda: settings.get_int("MORI_IO_TCP_OP_TIMEOUT_MS"))
    enable_keepalive: bool = True
    keepalive_idle_sec: int = 30
    keepalive_intvl_sec: int = 10
    keepalive_cnt: int = 3
    enable_ctrl_nodelay: bool = True
    num_data_conns: int = field(default_factory=lambda: settings.get_int("MORI_IO_TCP_NUM_DATA_CONNS"))
    striping_threshold_bytes: int = 65536
    min_stripe_bytes: int = 256 * 1024
    chunk_bytes: int = field(default_factory=lambda: settings.get_int("MORI_IO_TCP_CHUNK_BYTES"))

    def validate(self) -> None:
        """Raises InvalidArgumentError naming the first field outside its range."""
        check_int("num_data_conns", self.num_data_conns, 1, MAX_DATA_CONNS)
        check_int("op_timeout_ms", self.op_timeout_ms, 0, 2**40)
        check_int("sock_sndbuf_bytes", self.sock_sndbuf_bytes, 0, 2**31 - 1)
        check_int("sock_rcvbuf_bytes", self.sock_rcvbuf_bytes, 0, 2**31 - 1)
        check_int("striping_threshold_bytes", self.striping_threshold_bytes, 1, 2**40)
        check_int("min_stripe_bytes", self.min_stripe_bytes, 1, 2**40)
        check_int("chunk_bytes", self.chunk_bytes, 4096, 2**40)
        for name in ("keepalive_idle_sec", "keepalive_intvl_sec", "keepalive_cnt"):
            check_int(name, getattr(self, name), 1, 2**31 - 1)

    def apply(self, native: _C.Engine) -> None:
        self.validate()
        native.create_tcp_backend(
            num_data_conns=self.num_data_conns,
            striping_threshold_bytes=self.striping_threshold_bytes,
            min_stripe_bytes=self.min_stripe_bytes,
            chunk_bytes=self.chunk_bytes,
            op_timeout_ms=self.op_timeout_ms,
            sock_sndbuf_bytes=self.sock_sndbuf_bytes,
            sock_rcvbuf_bytes=self.sock_rcvbuf_bytes,
            enable_keepalive=bool(self.enable_keepalive),
            keepalive_idle_sec=self.keepalive_idle_sec,
            keepalive_intvl_sec=self.keepalive_intvl_sec,
            keepalive_cnt=self.keepalive_cnt,
            enable_ctrl_nodelay=bool(self.enable_ctrl_nodelay),
        )


@dataclass
class RdmaBackendConfig:
    """MORI's RDMA backend config (accepted for compatibility; RDMA is not built here yet)."""

    qp_per_transfer: int = 1
    post_batch_size: int = -1
    num_worker_threads: int = -1
    poll_cq_mode: _C.PollCqMode = _C.PollCqMode.POLLING
    enable_notification: bool = True
    notif_per_qp: int = 1024
    enable_transfer_chunking: bool = False
    chunk_bytes: int = 65536
    max_chunks_per_transfer: int = 64
    num_nics_per_transfer: int = 1
    max_send_wr: int = 0
    max_cqe_num: int = 0
    max_msg_sge: int = 0


#: Bounds of XgmiBackendConfig's pools (streams and events are made per GPU on its first transfer).
MAX_P2P_STREAMS = 1024
MAX_P2P_EVENTS = 65536


@dataclass
class XgmiBackendConfig:
    """MORI's XGMI backend config: the P2P backend's copy streams (a transfer's contiguous runs are
    spread over them) and the events made up front per GPU (more are made when all are busy).
    ``op_timeout_ms`` (an addition) fails a transfer whose copies have not finished by then."""

    num_streams: int = 64
    num_events: int = 64
    op_timeout_ms: int = field(default_factory=lambda: settings.get_int("MORI_IO_TCP_OP_TIMEOUT_MS"))

    def validate(self) -> None:
        """Raises InvalidArgumentError naming the first field outside its range."""
        check_int("num_streams", self.num_streams, 1, MAX_P2P_STREAMS)
        check_int("num_events", self.num_events, 1, MAX_P2P_EVENTS)
        check_int("op_timeout_ms", self.op_timeout_ms, 0, 2**40)

    def apply(self, native: _C.Engine) -> None:
        self.validate()
        native.create_p2p_backend(
            num_streams=self.num_streams, num_events=self.num_events, op_timeout_ms=self.op_timeout_ms
        )


@dataclass
class FabricBackendConfig:
    """MORI's FABRIC backend config (accepted for compatibility; not built here)."""

    num_streams: int = 64
    num_events: int = 64


BackendConfig = TcpBackendConfig | RdmaBackendConfig | XgmiBackendConfig | FabricBackendConfig


def check_backend_config(expected: type, config: object) -> None:
    if not isinstance(config, expected):
        raise InvalidArgumentError(f"config={config!r} must be a {expected.__name__} for this backend type")
