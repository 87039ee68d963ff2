# SPDX-License-Identifier: MIT
"""Engine and backend configurations with MORI's names, fields and defaults.

This build has the TCP backend (host and GPU memory), the P2P backend for GPU memory of engines
on one host (MORI's ``BackendType.XGMI`` with ``XgmiBackendConfig``) and the RDMA backend
(``BackendType.RDMA`` with ``RdmaBackendConfig``), which moves bytes through UCX: loaded at run
time from the ``libucx`` wheel (``pip install libucx-cu12``) or the system, it uses verbs where
there is RDMA hardware and TCP or shared memory elsewhere. The FABRIC config is accepted so that
code written for MORI constructs it unchanged, and ``create_backend`` refuses that type with
``UnsupportedError``.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

from mori._compat import note_no_effect
from mori.io import settings
from mori.io._native import _C
from mori.io.errors import ConfigError, InvalidArgumentError, UnsupportedError, check_int
from mori.settings import shared

_NativeConfig = TypeVar("_NativeConfig", _C.TcpConfig, _C.P2PConfig)


def _native_config(native: _NativeConfig, config: Any) -> _NativeConfig:
    """``native`` with every field of the (validated) dataclass ``config`` copied by name: the
    native backend config has MORI's field names, so a setting is spelled once per language."""
    for f in fields(config):
        setattr(native, f.name, getattr(config, f.name))
    return native


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
    min_stripe_bytes: int = 512 * 1024
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
        native.create_tcp_backend(_native_config(_C.TcpConfig(), self))


#: RdmaBackendConfig bounds: UCP endpoints per peer; operations posted per progress pass.
MAX_QP_PER_TRANSFER = 64
MAX_POST_BATCH = 65536
DEFAULT_POST_BATCH = 256
#: MORI's lower bound on chunk_bytes when chunking is on.
MIN_CHUNK_BYTES = 4096
_UCX_LIBRARY = "libucp.so.0"

log = logging.getLogger(__name__)


def ucx_library_dir() -> tuple[str, str]:
    """Where the RDMA backend loads UCX from, and how that was decided: MORI_IO_UCX_LIB_DIR when
    set; else the lib directory of the ``libucx`` wheel (RAPIDS' ``libucx-cu12``/``-cu13``) when it
    is installed; else ``""``, the system's ``libucp.so.0`` found by the dynamic loader."""
    configured = settings.get_str("MORI_IO_UCX_LIB_DIR")
    if configured:
        return configured, f"MORI_IO_UCX_LIB_DIR={configured}"
    spec = importlib.util.find_spec("libucx")  # located, not imported: its import loads UCX globally
    if spec is not None and spec.origin:
        lib = Path(spec.origin).parent / "lib"
        if (lib / _UCX_LIBRARY).is_file():
            return str(lib), f"the libucx wheel ({lib})"
    return "", f"the system ({_UCX_LIBRARY} through the dynamic loader; no libucx wheel is installed)"


_IB_SYSFS = Path("/sys/class/infiniband")


def rdma_devices_to_ucx(selection: str, ib_root: Path = _IB_SYSFS) -> str:
    """MORI_RDMA_DEVICES (``a,b`` uses only these, ``^a,b`` all but these) as UCX's NET_DEVICES.

    UCX names an InfiniBand/RoCE device by device and port (``mlx5_0:1``) where MORI names the
    device: a device found under ``ib_root`` without a port stands for each of its ports. Other
    names (``lo``, ``eth0``, or already ``dev:port``) are UCX's own and pass through. UCX reads a
    leading ``^`` as "all but" too.
    """
    text = selection.strip()
    exclude = text.startswith("^")
    names = [n.strip() for n in text.lstrip("^").split(",") if n.strip()]
    if not names:
        raise ConfigError(f"MORI_RDMA_DEVICES={selection!r} names no device")
    out: list[str] = []
    for name in names:
        ports_dir = ib_root / name / "ports"
        if ":" not in name and ports_dir.is_dir():
            ports = sorted((p.name for p in ports_dir.iterdir() if p.name.isdigit()), key=int)
            out += [f"{name}:{port}" for port in ports] or [name]
        else:
            out.append(name)
    return ("^" if exclude else "") + ",".join(out)


def _ucx_net_devices(host: str) -> str:
    """UCX_NET_DEVICES for an engine listening on ``host``: MORI_RDMA_DEVICES when set (MORI's NIC
    selection, which SGLang sets from its InfiniBand device option); else an engine kept to
    loopback keeps UCX's network transports there too (UCX's own sockets authenticate nobody),
    unless the user chose devices with UCX_NET_DEVICES."""
    selection = str(shared.get("MORI_RDMA_DEVICES"))
    if selection:
        devices = rdma_devices_to_ucx(selection)
        log.info("RDMA backend: MORI_RDMA_DEVICES=%s selects UCX NET_DEVICES=%s", selection, devices)
        return devices
    if settings.foreign("UCX_NET_DEVICES"):
        return ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return "lo" if loopback else ""


#: RdmaBackendConfig fields that UCX has no use for: (field, MORI's default, why), as in
#: docs/user-guide/compatibility.md; setting one to another value is logged once.
_RDMA_NO_EFFECT: tuple[tuple[str, int, str], ...] = (
    ("num_worker_threads", -1, "the UCX backend has one progress thread per backend; UCX splits batches itself"),
    ("notif_per_qp", 1024, "notifications are UCX active messages, which need no pre-posted receives"),
    ("num_nics_per_transfer", 1, "UCX spreads transfers over NICs itself (UCX_MAX_RNDV_RAILS); "
     "choose NICs with MORI_RDMA_DEVICES"),
    ("max_send_wr", 0, "UCX sizes its own send queues"),
    ("max_cqe_num", 0, "UCX sizes its own completion queues"),
    ("max_msg_sge", 0, "UCX chooses its own scatter-gather lists"),
)  # fmt: skip


@dataclass
class RdmaBackendConfig:
    """MORI's RDMA backend config, same fields, order and defaults, served by UCX's UCP API.

    What each field means here:

    - ``qp_per_transfer``: UCP endpoints per remote engine (1 to 64); a transfer's operations go
      round-robin over them, starting at ``uid % qp_per_transfer``.
    - ``post_batch_size``: operations a transfer posts before the worker progresses again (-1:
      256); at most four batches of one transfer are in flight at once.
    - ``poll_cq_mode``: POLLING keeps progressing for a moment after the last event before the
      worker thread sleeps; EVENT sleeps on UCX's event fd at once. Idle, neither uses CPU.
    - ``enable_notification``: after a transfer's data (and, for writes, a flush) an active message
      tells the target, which records it for ``pop_inbound_transfer_status`` and acknowledges; the
      initiator reports success on the acknowledgement. Off saves that round trip.
    - ``enable_transfer_chunking``, ``chunk_bytes``, ``max_chunks_per_transfer``: a contiguous run
      longer than ``chunk_bytes`` is cut into at most ``max_chunks_per_transfer`` pieces spread over
      the endpoints.
    - ``op_timeout_ms`` (an addition, default MORI_IO_TCP_OP_TIMEOUT_MS): a transfer not complete
      by then fails with ERR_RDMA_OP and the peer's endpoints are closed; 0 disables.

    Accepted and checked as in MORI, with no UCX meaning: ``num_worker_threads`` (one progress
    thread per backend), ``notif_per_qp`` (active messages need no pre-posted receives),
    ``num_nics_per_transfer`` (UCX spreads over rails itself, see UCX_MAX_RNDV_RAILS),
    ``max_send_wr``, ``max_cqe_num`` and ``max_msg_sge`` (UCX sizes its own queues).
    """

    qp_per_transfer: int = field(default_factory=lambda: settings.get_int("MORI_IO_QP_PER_TRANSFER"))
    post_batch_size: int = field(default_factory=lambda: settings.get_int("MORI_IO_POST_BATCH_SIZE"))
    num_worker_threads: int = -1
    poll_cq_mode: _C.PollCqMode = field(
        default_factory=lambda: _C.PollCqMode[settings.get_str("MORI_IO_POLL_CQ_MODE").upper()]
    )
    enable_notification: bool = field(default_factory=lambda: settings.get_bool("MORI_IO_ENABLE_NOTIFICATION"))
    notif_per_qp: int = 1024
    enable_transfer_chunking: bool = False
    chunk_bytes: int = 65536
    max_chunks_per_transfer: int = 64
    num_nics_per_transfer: int = 1
    max_send_wr: int = 0
    max_cqe_num: int = 0
    max_msg_sge: int = 0
    op_timeout_ms: int = field(default_factory=lambda: settings.get_int("MORI_IO_TCP_OP_TIMEOUT_MS"))

    def validate(self) -> None:
        """Raises InvalidArgumentError naming the first field outside its range."""
        check_int("qp_per_transfer", self.qp_per_transfer, 1, MAX_QP_PER_TRANSFER)
        if self.post_batch_size != -1:
            check_int("post_batch_size", self.post_batch_size, 1, MAX_POST_BATCH)
        if self.num_worker_threads != -1:
            check_int("num_worker_threads", self.num_worker_threads, 1, 1024)
        if not isinstance(self.poll_cq_mode, _C.PollCqMode):
            raise InvalidArgumentError(f"poll_cq_mode={self.poll_cq_mode!r} must be a PollCqMode")
        check_int("notif_per_qp", self.notif_per_qp, 1 if self.enable_notification else 0, 2**31 - 1)
        if self.enable_transfer_chunking:
            check_int("chunk_bytes", self.chunk_bytes, MIN_CHUNK_BYTES, 2**40)
            check_int("max_chunks_per_transfer", self.max_chunks_per_transfer, 1, 2**31 - 1)
        check_int("num_nics_per_transfer", self.num_nics_per_transfer, 1, 64)
        for name in ("max_send_wr", "max_cqe_num", "max_msg_sge"):
            check_int(name, getattr(self, name), 0, 2**31 - 1)
        check_int("op_timeout_ms", self.op_timeout_ms, 0, 2**40)

    def apply(self, native: _C.Engine, host: str) -> None:
        """Creates the backend on ``native``, an engine listening on ``host``; raises
        UnsupportedError naming where UCX was looked for and why it could not be used."""
        self.validate()
        _create_rdma_backend(native, self, host)


def _create_rdma_backend(native: _C.Engine, config: RdmaBackendConfig, host: str) -> None:
    """The native RDMA backend for a validated ``config``: what each field becomes for UCX."""
    for name, default, reason in _RDMA_NO_EFFECT:
        value = getattr(config, name)
        if value != default:
            note_no_effect(f"RdmaBackendConfig.{name}", value, reason)
    lib_dir, source = ucx_library_dir()
    native_config = _C.RdmaConfig()
    native_config.lib_dir = lib_dir
    native_config.net_devices = _ucx_net_devices(host)
    native_config.lanes = config.qp_per_transfer
    native_config.post_batch = DEFAULT_POST_BATCH if config.post_batch_size == -1 else config.post_batch_size
    native_config.polling = config.poll_cq_mode == _C.PollCqMode.POLLING
    native_config.notify = bool(config.enable_notification)
    native_config.chunk_bytes = config.chunk_bytes if config.enable_transfer_chunking else 0
    native_config.max_chunks = config.max_chunks_per_transfer
    native_config.op_timeout_ms = config.op_timeout_ms
    try:
        native.create_rdma_backend(native_config)
    except UnsupportedError as exc:
        log.info("no RDMA backend: UCX from %s is unusable: %s", source, exc)
        raise UnsupportedError(f"UCX from {source} is unusable: {exc}") from None


#: Bounds of XgmiBackendConfig's pools (streams and events are made per GPU on its first transfer).
MAX_P2P_STREAMS = 1024
MAX_P2P_EVENTS = 65536
MAX_RESIDENT_BLOCKS = 1024  # the native backend also caps it at the GPU's SM count


@dataclass
class XgmiBackendConfig:
    """MORI's XGMI backend config: the P2P backend's copy streams (a transfer's contiguous runs are
    spread over them) and the events made up front per GPU (more are made when all are busy).
    ``op_timeout_ms`` (an addition) fails a transfer whose copies have not finished by then;
    a transfer of at least ``scatter_gather_threshold`` separate runs is copied by one kernel
    launch instead of one copy-engine call per run (0: never). ``run_kernel`` (an addition) copies a
    transfer of one contiguous run with mori-io's kernel, which writes its completion into host
    memory: no event to record or query, which under MPS costs microseconds per transfer. False
    uses cuMemcpyAsync, which between two GPUs runs on the copy engines and leaves the SMs free.
    ``resident_blocks`` (an addition, 0: off) keeps a copy kernel of that many blocks on the GPU
    while one-run transfers keep coming: a transfer is then a few stores into a ring in host
    memory, not a launch. While resident it holds resident_blocks x 512 threads of the GPU, and a
    device-wide synchronize (torch.cuda.synchronize()) waits until it leaves, ``resident_idle_us``
    after the last transfer."""

    num_streams: int = 64
    num_events: int = 64
    op_timeout_ms: int = field(default_factory=lambda: settings.get_int("MORI_IO_TCP_OP_TIMEOUT_MS"))
    scatter_gather_threshold: int = field(
        default_factory=lambda: settings.get_int("MORI_IO_XGMI_SCATTER_GATHER_THRESHOLD")
    )
    run_kernel: bool = field(default_factory=lambda: settings.get_bool("MORI_IO_XGMI_RUN_KERNEL"))
    resident_blocks: int = field(default_factory=lambda: settings.get_int("MORI_IO_XGMI_RESIDENT_BLOCKS"))
    resident_idle_us: int = field(default_factory=lambda: settings.get_int("MORI_IO_XGMI_RESIDENT_IDLE_US"))

    def validate(self) -> None:
        """Raises InvalidArgumentError naming the first field outside its range."""
        check_int("num_streams", self.num_streams, 1, MAX_P2P_STREAMS)
        check_int("num_events", self.num_events, 1, MAX_P2P_EVENTS)
        check_int("op_timeout_ms", self.op_timeout_ms, 0, 2**40)
        check_int("scatter_gather_threshold", self.scatter_gather_threshold, 0, 2**31 - 1)
        if not isinstance(self.run_kernel, bool):
            raise InvalidArgumentError(f"run_kernel={self.run_kernel!r} must be a bool")
        check_int("resident_blocks", self.resident_blocks, 0, MAX_RESIDENT_BLOCKS)
        check_int("resident_idle_us", self.resident_idle_us, 1, 10**7)

    def apply(self, native: _C.Engine) -> None:
        self.validate()
        native.create_p2p_backend(_native_config(_C.P2PConfig(), self))


@dataclass
class FabricBackendConfig:
    """MORI's FABRIC backend config (accepted for compatibility; not built here: creating the
    backend raises UnsupportedError)."""

    num_streams: int = 64
    num_events: int = 64

    def __post_init__(self) -> None:
        for name in ("num_streams", "num_events"):
            if getattr(self, name) != 64:
                note_no_effect(f"FabricBackendConfig.{name}", getattr(self, name), "there is no FABRIC backend")


BackendConfig = TcpBackendConfig | RdmaBackendConfig | XgmiBackendConfig | FabricBackendConfig


def check_backend_config(expected: type, config: object) -> None:
    if not isinstance(config, expected):
        raise InvalidArgumentError(f"config={config!r} must be a {expected.__name__} for this backend type")
