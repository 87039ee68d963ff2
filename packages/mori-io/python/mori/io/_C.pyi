# Type stub of the compiled module built from src/python/bindings.cpp; keep the two in step.
# Pointers cross the boundary as plain ints.
import enum
from collections.abc import Mapping, Sequence
from typing import Any

class StatusCode(enum.IntEnum):
    SUCCESS = 0
    INIT = 1
    IN_PROGRESS = 2
    ERR_BEGIN = 10
    ERR_INVALID_ARGS = 11
    ERR_NOT_FOUND = 12
    ERR_RDMA_OP = 13
    ERR_BAD_STATE = 14
    ERR_GPU_OP = 15

class MemoryLocationType(enum.IntEnum):
    Unknown = 0
    CPU = 1
    GPU = 2

class BackendType(enum.IntEnum):
    Unknown = 0
    XGMI = 1
    RDMA = 2
    TCP = 3
    FABRIC = 4

class PollCqMode(enum.IntEnum):
    POLLING = 0
    EVENT = 1

class TransferStatus:
    def __init__(self) -> None: ...
    def Code(self) -> StatusCode: ...
    def Message(self) -> str: ...
    def Init(self) -> bool: ...
    def InProgress(self) -> bool: ...
    def Succeeded(self) -> bool: ...
    def Failed(self) -> bool: ...
    def Wait(self) -> None: ...
    def WaitFor(self, timeout_ms: int = -1) -> StatusCode: ...
    def WaitBusy(self, timeout_ms: int = -1) -> StatusCode: ...
    def Update(self, code: StatusCode, message: str) -> None: ...
    def SetCode(self, code: StatusCode) -> None: ...
    def SetMessage(self, message: str) -> None: ...

def set_error_classes(classes: Mapping[int, type[BaseException]]) -> None: ...
def set_log_level(level: int) -> None: ...
def gpu_unavailable_reason() -> str: ...
def gpu_device_count() -> int: ...
def ucx_version(lib_dir: str) -> str: ...
def time_device_copies(
    device: int, dst: int, src: int, size: int, warmup: int, iters: int, host_timed: bool = False
) -> list[float]: ...
def wait_all(statuses: Sequence[TransferStatus], timeout_ms: int = -1) -> StatusCode: ...

class PeerRegion:
    def __init__(
        self, engine_key: str, data: int, size: int, ipc_handle: bytes, ipc_offset: int, same_process: bool
    ) -> None: ...
    @property
    def engine_key(self) -> str: ...
    @property
    def same_process(self) -> bool: ...

class Engine:
    def __init__(
        self,
        key: str,
        host: str,
        port: int,
        secret: bytes,
        connect_timeout_ms: int,
        handshake_timeout_ms: int,
        io_timeout_ms: int,
        max_frame_bytes: int,
        max_segments: int,
        max_connections: int,
        max_pending_connections: int,
        max_inbound_per_peer: int,
    ) -> None: ...
    @property
    def key(self) -> str: ...
    @property
    def secret(self) -> bytes: ...
    @property
    def port(self) -> int: ...
    def create_tcp_backend(
        self,
        num_data_conns: int,
        striping_threshold_bytes: int,
        min_stripe_bytes: int,
        chunk_bytes: int,
        op_timeout_ms: int,
        sock_sndbuf_bytes: int,
        sock_rcvbuf_bytes: int,
        enable_keepalive: bool,
        keepalive_idle_sec: int,
        keepalive_intvl_sec: int,
        keepalive_cnt: int,
        enable_ctrl_nodelay: bool,
    ) -> None: ...
    def remove_tcp_backend(self) -> None: ...
    def has_tcp_backend(self) -> bool: ...
    def create_p2p_backend(
        self,
        num_streams: int,
        num_events: int,
        op_timeout_ms: int,
        kernel_min_segments: int,
        run_kernel: bool,
        resident_blocks: int,
        resident_idle_us: int,
    ) -> None: ...
    def remove_p2p_backend(self) -> None: ...
    def has_p2p_backend(self) -> bool: ...
    def create_rdma_backend(
        self,
        lib_dir: str,
        net_devices: str,
        lanes: int,
        post_batch: int,
        polling: bool,
        notify: bool,
        chunk_bytes: int,
        max_chunks: int,
        op_timeout_ms: int,
    ) -> None: ...
    def remove_rdma_backend(self) -> None: ...
    def has_rdma_backend(self) -> bool: ...
    def rdma_supports_gpu(self) -> bool: ...
    def register_remote(self, key: str, host: str, port: int, secret: bytes) -> None: ...
    def deregister_remote(self, key: str) -> None: ...
    def knows_remote(self, key: str) -> bool: ...
    def register_memory(
        self, ptr: int, size: int, loc: MemoryLocationType, device: int
    ) -> tuple[int, str, bytes, int]: ...
    def deregister_memory(self, mem_id: int) -> None: ...
    def allocate_uid(self) -> int: ...
    def transfer(
        self,
        is_read: bool,
        local_id: int,
        remote_key: str,
        remote_id: int,
        remote_size: int,
        local_offsets: Any,
        remote_offsets: Any,
        sizes: Any,
        uid: int,
        peer: PeerRegion | None = None,
    ) -> TransferStatus: ...
    def pop_inbound(self, remote_key: str, uid: int) -> tuple[StatusCode, str] | None: ...
    def query_remote_memory(self, remote_key: str, mem_id: int) -> int: ...
    def ping(self, remote_key: str) -> bool: ...
    def shutdown(self) -> None: ...

class SessionPair:
    def __init__(
        self,
        engine: Engine,
        local_id: int,
        remote_key: str,
        remote_id: int,
        remote_size: int,
        peer: PeerRegion | None = None,
    ) -> None: ...
    def post(self, is_read: bool, local_offsets: Any, remote_offsets: Any, sizes: Any, uid: int) -> TransferStatus: ...
