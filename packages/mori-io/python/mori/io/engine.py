# SPDX-License-Identifier: MIT
"""IOEngine: MORI's point-to-point transfer engine over the native TCP, P2P and RDMA backends.

One-sided and asynchronous: ``read``/``write`` return a ``TransferStatus`` at once and IO threads
(TCP), the GPU's copy engines (P2P) or UCX (RDMA) move the bytes. The native engine's route chain
(src/engine/route.cpp) picks the backend per memory pair, in MORI's order: P2P
(``BackendType.XGMI``) when both sides are GPU memory of engines on one host and that backend was
created, then RDMA (``BackendType.RDMA``, through UCX) when created, then TCP, which stages GPU
memory through pinned host buffers. A transfer that fails to start or fails on one backend is
retried on the next (logged). This layer checks arguments and hands the descriptors over.

Arguments are checked before anything is sent (typed exceptions naming the
argument, value and limit); failures after that (peer unreachable, lost, silent past
``op_timeout_ms``) come back in the status, never as a hang.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mori.io import settings
from mori.io._native import _C, apply_log_level
from mori.io.config import (
    BackendConfig,
    FabricBackendConfig,
    IOEngineConfig,
    RdmaBackendConfig,
    TcpBackendConfig,
    XgmiBackendConfig,
    check_backend_config,
)
from mori.io.descriptors import MAX_TEXT_BYTES, EngineDesc, MemoryDesc
from mori.io.errors import ConfigError, InvalidArgumentError, NotFoundError, UnsupportedError, check_int
from mori.io.session import IOEngineSession
from mori.settings import shared

log = logging.getLogger(__name__)

BackendType = _C.BackendType
MemoryLocationType = _C.MemoryLocationType
StatusCode = _C.StatusCode
TransferStatus = _C.TransferStatus

#: Transfer uids must stay below 2**63 (MORI reserves bit 63).
MAX_UID = 2**63 - 1
#: Bounds of MORI_IO_MAX_FRAME_BYTES / MORI_IO_MAX_SEGMENTS: the floors and ceilings an initiator
#: clamps a target's announced limits to (kMinFrameBytes etc. in src/net/protocol.hpp). Fewer
#: segments than the floor narrow what this engine sends; as a target it accepts the floor.
MIN_FRAME_BYTES = 64 * 1024
MAX_FRAME_BYTES = 1 << 30
MAX_SEGMENTS = 1 << 20
#: Remote MemoryDescs whose native form an engine keeps (IOEngine._native_remote).
_NATIVE_REMOTES_KEPT = 4096
_DEFAULT_CONFIGS: dict[Any, type] = {
    BackendType.TCP: TcpBackendConfig,
    BackendType.RDMA: RdmaBackendConfig,
    BackendType.XGMI: XgmiBackendConfig,
    BackendType.FABRIC: FabricBackendConfig,
}


def _node_id() -> str:
    node = str(shared.get("MORI_NODE_ID"))
    if node:
        return node
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return socket.gethostname()


def _remote_memory(desc: MemoryDesc) -> _C.RemoteMemory:
    """The native form of a remote MemoryDesc: what the route chain reads of it."""
    return _C.RemoteMemory(desc.engine_key, desc.id, desc.size, desc.loc, desc.data, desc.ipc_handle, desc.ipc_offset)


def _register_native(native: _C.Engine, desc: EngineDesc) -> None:
    native.register_remote(desc.key, desc.host, desc.port, desc.secret, desc.node_id, desc.hostname, desc.pid)


def _advertised_host(host: str) -> str:
    # A wildcard listener is reachable at the host's own address, not at 0.0.0.0.
    if host in ("0.0.0.0", ""):
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
    return host


def _length(name: str, value: object) -> int:
    """len(value) of a list-like argument, else InvalidArgumentError naming it."""
    if isinstance(value, str | bytes) or not hasattr(value, "__getitem__"):
        raise InvalidArgumentError(f"{name}={value!r} must be a list")
    try:
        return len(value)  # type: ignore[arg-type]
    except TypeError:
        raise InvalidArgumentError(f"{name}={value!r} must be a list") from None


def _setting(name: str, low: int, high: int) -> int:
    """An int setting within [low, high], else ConfigError naming it and the limits."""
    value = settings.get_int(name)
    if not low <= value <= high:
        raise ConfigError(f"{name}={value} is out of range [{low}, {high}]")
    return value


def _secret(config: IOEngineConfig) -> bytes:
    if config.secret is not None:
        if not isinstance(config.secret, bytes) or not 16 <= len(config.secret) <= 256:
            raise InvalidArgumentError("IOEngineConfig.secret must be 16 to 256 bytes")
        return config.secret
    return bytes.fromhex(settings.get_str("MORI_IO_SECRET"))


class IOEngine:
    """MORI's ``IOEngine(key, config)``. Also a context manager: leaving it shuts the engine down."""

    def __init__(self, key: str, config: IOEngineConfig) -> None:
        if not isinstance(key, str) or not 0 < len(key.encode()) <= MAX_TEXT_BYTES:
            raise InvalidArgumentError(f"key={key!r} must be a non-empty str of at most {MAX_TEXT_BYTES} bytes")
        if not isinstance(config, IOEngineConfig):
            raise InvalidArgumentError(f"config={config!r} must be an IOEngineConfig")
        port = check_int("config.port", config.port, 0, 65535)
        host = config.host or settings.get_str("MORI_IO_HOST")
        if not isinstance(host, str):
            raise InvalidArgumentError(f"config.host={host!r} must be a str")
        apply_log_level()
        node_id = _node_id()
        hostname = socket.gethostname()
        self._native = _C.Engine(
            key=key,
            host=host,
            port=port,
            secret=_secret(config),
            node_id=node_id,
            hostname=hostname,
            connect_timeout_ms=_setting("MORI_IO_CP_TIMEOUT_MS", 1, 2**40),
            handshake_timeout_ms=_setting("MORI_IO_HANDSHAKE_TIMEOUT_MS", 1, 2**40),
            io_timeout_ms=_setting("MORI_IO_TCP_OP_TIMEOUT_MS", 0, 2**40),
            max_frame_bytes=_setting("MORI_IO_MAX_FRAME_BYTES", MIN_FRAME_BYTES, MAX_FRAME_BYTES),
            max_segments=_setting("MORI_IO_MAX_SEGMENTS", 1, MAX_SEGMENTS),
            max_connections=_setting("MORI_IO_MAX_CONNECTIONS", 1, 2**31 - 1),
            max_pending_connections=_setting("MORI_IO_MAX_PENDING_CONNECTIONS", 1, 2**31 - 1),
            max_inbound_per_peer=_setting("MORI_IO_MAX_INBOUND_STATUS", 1, 2**31 - 1),
        )
        self._key = key
        self._host = host
        self._desc = EngineDesc(
            key=key,
            node_id=node_id,
            hostname=hostname,
            host=_advertised_host(host),
            port=self._native.port,
            pid=os.getpid(),
            secret=self._native.secret,
        )
        self._lock = threading.Lock()
        self._backends: dict[Any, BackendConfig] = {}
        self._memory: dict[int, MemoryDesc] = {}
        self._remotes: dict[str, EngineDesc] = {}
        # The native form of remote MemoryDescs recently transferred with, by (engine key, id), kept
        # with the descriptor it was made from: building one costs more than a small transfer's
        # Python side. Bounded; a miss only builds it again.
        self._native_remotes: dict[tuple[str, int], tuple[MemoryDesc, _C.RemoteMemory]] = {}
        # MORI's engine handles its own key: a transfer between two of its own memories loops back
        # through its own listener (and P2P, for GPU memory with that backend).
        _register_native(self._native, self._desc)
        self._remotes[key] = self._desc
        log.info("IOEngine %r listening on %s:%d", key, host, self._desc.port)

    # -- lifetime -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Fails transfers in flight, closes every connection and the listener. Idempotent."""
        self._native.shutdown()

    def __enter__(self) -> IOEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"IOEngine(key={self._key!r}, port={self._desc.port}, backends={[b.name for b in self._backends]})"

    # -- identity, backends, peers ------------------------------------------------------------
    def get_engine_desc(self) -> EngineDesc:
        """This engine's descriptor; send ``desc.pack()`` to peers out of band."""
        return self._desc

    def create_backend(self, type: _C.BackendType, config: BackendConfig | None = None) -> None:
        """Creates the backend of ``type``: ``BackendType.TCP``; ``BackendType.XGMI`` (P2P between
        GPUs of one host; raises UnsupportedError naming why when there is no CUDA driver or GPU);
        ``BackendType.RDMA`` (through UCX; raises UnsupportedError naming why when UCX cannot be
        loaded). Creating one that exists replaces it."""
        if not isinstance(type, BackendType):
            raise InvalidArgumentError(f"type={type!r} must be a BackendType")
        if type not in _DEFAULT_CONFIGS:
            raise UnsupportedError(f"type={type!r}: unknown backend type")
        cfg = config if config is not None else _DEFAULT_CONFIGS[type]()
        check_backend_config(_DEFAULT_CONFIGS[type], cfg)
        if type == BackendType.TCP:
            assert isinstance(cfg, TcpBackendConfig)
            cfg.apply(self._native)
        elif type == BackendType.XGMI:
            assert isinstance(cfg, XgmiBackendConfig)
            try:
                cfg.apply(self._native)
            except UnsupportedError as exc:
                raise UnsupportedError(f"type=XGMI (the P2P backend between GPUs of one host): {exc}") from None
        elif type == BackendType.RDMA:
            assert isinstance(cfg, RdmaBackendConfig)
            try:
                cfg.apply(self._native, self._host)
            except UnsupportedError as exc:
                raise UnsupportedError(f"type=RDMA (the UCX backend): {exc}") from None
        else:
            raise UnsupportedError(f"type={type.name}: this build of mori.io has the TCP, XGMI (P2P) and RDMA backends")
        self._backends[type] = cfg

    def remove_backend(self, type: _C.BackendType) -> None:
        """Removes a backend; TCP and RDMA transfers still in flight fail, P2P ones finish first."""
        if not isinstance(type, BackendType):
            raise InvalidArgumentError(f"type={type!r} must be a BackendType")
        if type == BackendType.TCP and type in self._backends:
            self._native.remove_tcp_backend()
        if type == BackendType.XGMI and type in self._backends:
            self._native.remove_p2p_backend()
        if type == BackendType.RDMA and type in self._backends:
            self._native.remove_rdma_backend()
        self._backends.pop(type, None)

    def register_remote_engine(self, desc: EngineDesc) -> None:
        """Makes a peer known (its address and secret); the connection opens on first use."""
        if not isinstance(desc, EngineDesc):
            raise InvalidArgumentError(f"desc={desc!r} must be an EngineDesc")
        _register_native(self._native, desc)
        with self._lock:
            self._remotes[desc.key] = desc

    def deregister_remote_engine(self, desc: EngineDesc) -> None:
        """Forgets a peer; its transfers in flight fail."""
        if not isinstance(desc, EngineDesc):
            raise InvalidArgumentError(f"desc={desc!r} must be an EngineDesc")
        self._native.deregister_remote(desc.key)
        with self._lock:
            self._remotes.pop(desc.key, None)

    # -- memory -------------------------------------------------------------------------------
    def register_memory(self, ptr: int, size: int, device_id: int, mem_loc: _C.MemoryLocationType) -> MemoryDesc:
        """Registers ``size`` bytes at address ``ptr``; they must stay valid until deregistered.

        GPU memory (``mem_loc=GPU``, ``device_id`` its CUDA ordinal) raises UnsupportedError naming
        why when there is no CUDA driver or GPU, and InvalidArgumentError when ``device_id`` is not
        a visible device or ``ptr`` is not that device's memory.
        """
        ptr = check_int("ptr", ptr, 0, 2**64 - 1)
        size = check_int("size", size, 0, 2**64 - 1 - ptr)
        device_id = check_int("device_id", device_id, -1, 2**31 - 1)
        if not isinstance(mem_loc, MemoryLocationType):
            raise InvalidArgumentError(f"mem_loc={mem_loc!r} must be a MemoryLocationType")
        mem_id, bus_id, ipc_handle, ipc_offset = self._native.register_memory(ptr, size, mem_loc, device_id)
        desc = MemoryDesc(self._key, mem_id, device_id, bus_id, -1, ptr, size, mem_loc, ipc_handle, ipc_offset)
        with self._lock:
            self._memory[mem_id] = desc
        return desc

    def register_torch_tensor(self, tensor: Any) -> MemoryDesc:
        """Registers a contiguous tensor's storage (duck-typed: torch is not imported)."""
        if not callable(getattr(tensor, "is_contiguous", None)) or not hasattr(tensor, "data_ptr"):
            raise InvalidArgumentError(f"tensor of type {type(tensor).__name__} is not a torch.Tensor")
        if not tensor.is_contiguous():
            raise InvalidArgumentError("tensor must be contiguous (call .contiguous() first)")
        device = tensor.device
        loc = MemoryLocationType.GPU if device.type == "cuda" else MemoryLocationType.CPU
        if device.type not in ("cpu", "cuda"):
            raise UnsupportedError(f"tensor.device={device} is neither cpu nor cuda")
        index = device.index if device.index is not None else -1
        return self.register_memory(tensor.data_ptr(), tensor.nelement() * tensor.element_size(), index, loc)

    def deregister_memory(self, desc: MemoryDesc) -> None:
        """Deregisters; returns once no transfer reads or writes the memory any more."""
        self._own_memory(desc, "desc")
        self._native.deregister_memory(desc.id)
        with self._lock:
            self._memory.pop(desc.id, None)

    def allocate_transfer_uid(self) -> int:
        """A fresh transfer uid (a per-engine counter starting at 0)."""
        return self._native.allocate_uid()

    # -- transfers ------------------------------------------------------------------------------
    def read(self, local_dest_mem_desc: MemoryDesc, local_offset: int, remote_src_mem_desc: MemoryDesc,
             remote_offset: int, size: int, transfer_uid: int) -> TransferStatus:  # fmt: skip
        """Reads ``size`` bytes of the remote memory into the local memory."""
        return self._transfer(True, local_dest_mem_desc, local_offset, remote_src_mem_desc, remote_offset, size,
                              transfer_uid)  # fmt: skip

    def write(self, local_src_mem_desc: MemoryDesc, local_offset: int, remote_dest_mem_desc: MemoryDesc,
              remote_offset: int, size: int, transfer_uid: int) -> TransferStatus:  # fmt: skip
        """Writes ``size`` bytes of the local memory into the remote memory."""
        return self._transfer(False, local_src_mem_desc, local_offset, remote_dest_mem_desc, remote_offset, size,
                              transfer_uid)  # fmt: skip

    def batch_read(self, local_dest_mem_descs: Sequence[MemoryDesc], local_offsets: Sequence[Any],
                   remote_src_mem_descs: Sequence[MemoryDesc], remote_offsets: Sequence[Any],
                   sizes: Sequence[Any], transfer_uids: Sequence[int]) -> list[TransferStatus]:  # fmt: skip
        """MORI's multi-pair batch: one status and one uid per (local, remote) pair."""
        return self._batch(True, local_dest_mem_descs, local_offsets, remote_src_mem_descs, remote_offsets, sizes,
                           transfer_uids)  # fmt: skip

    def batch_write(self, local_src_mem_descs: Sequence[MemoryDesc], local_offsets: Sequence[Any],
                    remote_dest_mem_descs: Sequence[MemoryDesc], remote_offsets: Sequence[Any],
                    sizes: Sequence[Any], transfer_uids: Sequence[int]) -> list[TransferStatus]:  # fmt: skip
        """MORI's multi-pair batch write: one status and one uid per (local, remote) pair."""
        return self._batch(False, local_src_mem_descs, local_offsets, remote_dest_mem_descs, remote_offsets, sizes,
                           transfer_uids)  # fmt: skip

    def create_session(self, local_mem: MemoryDesc, remote_mem: MemoryDesc) -> IOEngineSession | None:
        """A handle for repeated transfers between one pair; None when no backend can serve it.

        Like MORI's session set-up, this connects to the peer and checks once that the remote
        memory is still registered there with the size ``remote_mem`` claims.
        """
        self._own_memory(local_mem, "local_mem")
        self._known_remote(remote_mem, "remote_mem")
        remote = self._native_remote(remote_mem)
        if BackendType.TCP not in self._backends and BackendType.RDMA not in self._backends:
            # P2P alone (or nothing): no control connection to ask the peer over.
            if self._native.first_route(local_mem.id, remote) is None:
                return None
            return IOEngineSession(self, local_mem, remote_mem, remote)
        size = self._native.query_remote_memory(remote_mem.engine_key, remote_mem.id)
        if size != remote_mem.size:
            raise InvalidArgumentError(
                f"remote_mem is stale: memory id {remote_mem.id} of engine {remote_mem.engine_key!r} has "
                f"{size} bytes, the descriptor says {remote_mem.size}"
            )
        return IOEngineSession(self, local_mem, remote_mem, remote)

    def pop_inbound_transfer_status(self, remote_key: str, transfer_uid: int) -> TransferStatus | None:
        """Target side: the state of initiator ``remote_key``'s transfer ``transfer_uid`` into (or
        out of) this engine's memory; None if none of it arrived yet. A final state is removed once
        returned."""
        if not isinstance(remote_key, str):
            raise InvalidArgumentError(f"remote_key={remote_key!r} must be a str")
        uid = check_int("transfer_uid", transfer_uid, 0, MAX_UID)
        found = self._native.pop_inbound(remote_key, uid)
        if found is None:
            return None
        status = TransferStatus()
        status.SetMessage(found[1])
        status.SetCode(found[0])
        return status

    @staticmethod
    def wait_all(statuses: Sequence[TransferStatus], timeout_ms: int = -1) -> _C.StatusCode:
        """Waits for every status: a failure wins, an empty list succeeds, ``0`` polls once, and a
        timeout returns IN_PROGRESS."""
        if isinstance(statuses, TransferStatus):
            raise InvalidArgumentError("statuses must be a sequence of TransferStatus, not one TransferStatus")
        try:
            items = list(statuses)
        except TypeError:
            raise InvalidArgumentError(f"statuses={statuses!r} must be a sequence of TransferStatus") from None
        for i, status in enumerate(items):
            if not isinstance(status, TransferStatus):
                raise InvalidArgumentError(f"statuses[{i}]={status!r} must be a TransferStatus")
        timeout = check_int("timeout_ms", timeout_ms, -1, 2**62)
        return _C.wait_all(items, timeout)

    # -- helpers --------------------------------------------------------------------------------
    def _own_memory(self, desc: object, name: str) -> MemoryDesc:
        if not isinstance(desc, MemoryDesc):
            raise InvalidArgumentError(f"{name}={desc!r} must be a MemoryDesc")
        if desc.engine_key != self._key:
            raise InvalidArgumentError(
                f"{name} belongs to engine {desc.engine_key!r}, not to this engine {self._key!r}"
            )
        with self._lock:
            if desc.id not in self._memory:
                raise NotFoundError(f"{name}: memory id {desc.id} is not registered with engine {self._key!r}")
        return desc

    def _known_remote(self, desc: object, name: str) -> MemoryDesc:
        if not isinstance(desc, MemoryDesc):
            raise InvalidArgumentError(f"{name}={desc!r} must be a MemoryDesc")
        with self._lock:
            if desc.engine_key not in self._remotes:
                raise NotFoundError(
                    f"{name}: engine {desc.engine_key!r} is not registered; call register_remote_engine first"
                )
        return desc

    def _native_remote(self, desc: MemoryDesc) -> _C.RemoteMemory:
        """``desc`` as the native engine takes it, reused while the caller passes the same object."""
        key = (desc.engine_key, desc.id)
        cached = self._native_remotes.get(key)
        if cached is not None and cached[0] is desc:
            return cached[1]
        native = _remote_memory(desc)
        if len(self._native_remotes) >= _NATIVE_REMOTES_KEPT:
            self._native_remotes.clear()
        self._native_remotes[key] = (desc, native)
        return native

    def _transfer(self, is_read: bool, local: MemoryDesc, local_offsets: Any, remote: MemoryDesc,
                  remote_offsets: Any, sizes: Any, uid: int) -> TransferStatus:  # fmt: skip
        """One pair's transfer; the native engine checks the offsets, sizes and uid (sessions call
        it directly)."""
        self._own_memory(local, "local memory")
        self._known_remote(remote, "remote memory")
        native_remote = self._native_remote(remote)
        return self._native.transfer(is_read, local.id, native_remote, local_offsets, remote_offsets, sizes, uid)

    def _batch(self, is_read: bool, locals_: Sequence[MemoryDesc], local_offsets: Sequence[Any],
               remotes: Sequence[MemoryDesc], remote_offsets: Sequence[Any], sizes: Sequence[Any],
               uids: Sequence[int]) -> list[TransferStatus]:  # fmt: skip
        # The outer lists must pair up (MORI asserts it); each pair's own offsets and sizes are
        # checked by the native engine, which reports a mismatch in that pair's status as MORI does.
        n = _length("local_mem_descs", locals_)
        lengths = {"remote_mem_descs": _length("remote_mem_descs", remotes),
                   "local_offsets": _length("local_offsets", local_offsets),
                   "remote_offsets": _length("remote_offsets", remote_offsets),
                   "sizes": _length("sizes", sizes), "transfer_uids": _length("transfer_uids", uids)}  # fmt: skip
        for name, length in lengths.items():
            if length != n:
                raise InvalidArgumentError(f"{name} has {length} entries; expected one per local_mem_desc ({n})")
        return [
            self._transfer(is_read, locals_[i], local_offsets[i], remotes[i], remote_offsets[i], sizes[i], uids[i])
            for i in range(n)
        ]
