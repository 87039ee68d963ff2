# SPDX-License-Identifier: MIT
"""The communicator (MORI's ``mori.cco.Communicator``) and its handles."""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from mori._compat import note_no_effect
from mori.cco import _C
from mori.cco.errors import CcoDeviceError, CcoInvalidArgumentError
from mori.cco.layout import (
    ERROR_NAMES,
    GDA_CONNECTION_CROSSNODE,
    GDA_CONNECTION_FULL,
    GDA_CONNECTION_NONE,
    GDA_CONNECTION_RAIL,
    DevComm,
    Window,
)
from mori.cco.tensors import tensor_at

logger = logging.getLogger("mori.cco")

UNIQUE_ID_BYTES = 128
_BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2}


class UniqueId:
    """The 128-byte rendezvous token of one communicator: make it on one rank, hand it to all.
    Pickles as its bytes (mpi4py bcast, multiprocessing)."""

    def __init__(self, raw: bytes) -> None:
        if len(raw) != UNIQUE_ID_BYTES:
            raise CcoInvalidArgumentError(f"unique_id has {len(raw)} bytes, expected {UNIQUE_ID_BYTES}")
        self._raw = bytes(raw)

    @classmethod
    def from_bytes(cls, raw: bytes) -> UniqueId:
        return cls(raw)

    def __bytes__(self) -> bytes:
        return self._raw

    def __getstate__(self) -> bytes:
        return self._raw

    def __setstate__(self, state: bytes) -> None:
        self._raw = state

    def __repr__(self) -> str:
        return f"UniqueId({self._raw[:8].hex()}...)"


def get_unique_id() -> UniqueId:
    """A fresh unique id (a free port on the bootstrap interface, ``MORI_SOCKET_IFNAME``, and a new
    job secret); rank 0 listens on that port when it joins."""
    return UniqueId(_C.get_unique_id())


@dataclass(frozen=True)
class AllocatedMemory:
    """Symmetric memory: ``ptr`` is this rank's address; every rank's copy is at the same offset."""

    ptr: int
    size: int


@dataclass(frozen=True)
class RegisteredWindow:
    """A registered range; ``handle`` (offset and size inside every slot) is what kernels take."""

    handle: Window
    local_ptr: int
    size: int

    @property
    def pair(self) -> tuple[int, int]:
        """(offset, size): how a window crosses into the native module."""
        return int(self.handle.offset), int(self.handle.size)


@dataclass
class CCODevCommRequirements:
    """What a device communicator reserves (MORI's names and defaults). ``lsa_barrier_count``,
    ``gda_signal_count``, ``gda_counter_count`` and ``sdma_queue_count`` size the resource window;
    the fields of :data:`NO_EFFECT_REQUIREMENTS` are accepted for compatibility with no effect
    (logged once when not at their default; docs/user-guide/compatibility.md says why)."""

    gda_connection_type: int = GDA_CONNECTION_CROSSNODE
    gda_context_count: int = 4
    gda_signal_count: int = 16
    gda_counter_count: int = 16
    gda_queue_depth: int = 0
    gda_traffic_class: int = -1
    lsa_barrier_count: int = 0
    rail_gda_barrier_count: int = 0
    sdma_queue_count: int = 0
    barrier_count: int = 0


_GDA_CONNECTION_TYPES = (GDA_CONNECTION_NONE, GDA_CONNECTION_FULL, GDA_CONNECTION_CROSSNODE, GDA_CONNECTION_RAIL)

#: Fields of CCODevCommRequirements accepted with no effect, and why (the rows of the mori-cco
#: section of docs/user-guide/compatibility.md).
NO_EFFECT_REQUIREMENTS: dict[str, str] = {
    "gda_connection_type": (
        "every rank of another node is reached through the communicator's device proxy, whose "
        "connections are made when the communicator is created, and every rank of this node by "
        "load/store, whatever the type; the value is only copied into the dev comm"
    ),
    "gda_context_count": "GDA requests go through one device proxy per rank, not through NIC queue-pair contexts",
    "gda_queue_depth": "the device proxy posts no NIC send queue whose depth could be set",
    "gda_traffic_class": "the proxy's transport (mori-shmem's TCP or UCX conduit) sets no InfiniBand traffic class",
    "rail_gda_barrier_count": (
        "mori-cco's device API has no rail GDA barrier (MORI's ccoGdaBarrierSession); synchronise "
        "across nodes with gda_put_signal and wait_signal, sized by gda_signal_count"
    ),
    "barrier_count": (
        "mori-cco's device API has no hybrid barrier (MORI's hybridLsaBarrier); LSA barriers are "
        "sized by lsa_barrier_count, cross-node signals by gda_signal_count"
    ),
}
_REQUIREMENT_DEFAULTS = {f.name: f.default for f in fields(CCODevCommRequirements)}

#: MORI environment variables in mori-cco's registry that have no effect, and why (the rows of the
#: mori-cco section of docs/user-guide/compatibility.md).
NO_EFFECT_VARIABLES: dict[str, str] = {
    "MORI_ENABLE_SDMA": (
        "mori-cco's copy engine (a CUDA stream per peer and queue; host threads on the cpu backend) "
        "is always available, so there is no SDMA engine to switch on"
    ),
    "MORI_CCO_FABRIC_LENIENT": (
        "it lets MORI go on when mapping the memory of an LSA peer on another host fails; mori-cco "
        "maps peers only within one machine (an LSA team across machines is refused when the "
        "communicator is created), so there is no such mapping to tolerate"
    ),
    "MORI_CCO_BC": (
        "it names a prebuilt device bitcode for MORI's FlyDSL front end; mori-cco has no FlyDSL "
        "library: kernels include the CUDA device headers (mori_cco/cco_device.cuh) and mori-shmem's "
        "JIT compiles them"
    ),
}


def _note_no_effect_variables() -> None:
    """Logs each no-effect variable set to other than its default (an int one is parsed first, so
    a malformed value is still a CcoInvalidArgumentError)."""
    registry = {entry["name"]: entry for entry in _C.settings()}
    for variable, reason in NO_EFFECT_VARIABLES.items():
        entry = registry[variable]
        if entry["type"] == "int":
            value: object = int(_C.setting_int(variable))
            default: object = int(entry["default"])
        else:
            value, default = entry["effective"], entry["default"]
        if value != default:
            note_no_effect(variable, value, reason)


def _check_requirements(reqs: CCODevCommRequirements) -> dict[str, Any]:
    """The requirements as the native module takes them; logs the no-effect fields that are set."""
    values = asdict(reqs)
    if values["gda_connection_type"] not in _GDA_CONNECTION_TYPES:
        raise CcoInvalidArgumentError(
            f"gda_connection_type={values['gda_connection_type']!r} is not one of {_GDA_CONNECTION_TYPES} "
            "(GDA_CONNECTION_NONE, _FULL, _CROSSNODE, _RAIL)"
        )
    for name, reason in NO_EFFECT_REQUIREMENTS.items():
        if values[name] != _REQUIREMENT_DEFAULTS[name]:
            note_no_effect(f"CCODevCommRequirements.{name}", values[name], reason)
    return values


@dataclass(frozen=True)
class DevCommHandle:
    """A device communicator. Pass ``struct`` (a ``mori_cco_dev_comm_t``) by value to kernels."""

    raw: bytes
    rank: int
    world_size: int
    lsa_size: int
    lsa_rank: int
    flat_base: int
    per_rank_size: int

    @property
    def struct(self) -> DevComm:
        return DevComm.from_buffer_copy(self.raw)

    def resource_address(self, lsa_rank: int, offset: int) -> int:
        """Address of a word of ``lsa_rank``'s resource window (offset as in dev_comm.h)."""
        resource_offset = int(self.struct.resource.offset)
        return self.flat_base + lsa_rank * self.per_rank_size + resource_offset + offset


class Communicator:
    """A communicator over a flat address range (see dev_comm.h): each rank owns a slot of
    ``per_rank_size`` bytes, mapped by every rank of the node. Create it with :meth:`init`; use it
    as a context manager or call :meth:`destroy`. Methods may be called from several threads."""

    get_unique_id = staticmethod(get_unique_id)

    def __init__(self, native: Any) -> None:
        self._native: Any = native  # the _C.Comm handle (ccoComm_t)
        self._info: dict[str, Any] = _C.comm_info(native)  # fixed for the communicator's life
        self._lock = threading.Lock()
        self._collectives: Any = None
        self._allocations: list[AllocatedMemory] = []

    @classmethod
    def init(
        cls,
        nranks: int,
        rank: int,
        unique_id: UniqueId | bytes,
        per_rank_vmm: int = 0,
        *,
        backend: str = "auto",
        device: int | None = None,
    ) -> Communicator:
        """COLLECTIVE: joins the communicator of ``unique_id`` as ``rank`` of ``nranks``.

        ``per_rank_vmm``: bytes of each rank's slot (0: ``MORI_CCO_PER_RANK_VMM``, 4 GiB); only
        what is allocated is backed. ``backend``: "auto" (``MORI_CCO_BACKEND``), "cpu" or "cuda";
        ``device``: the CUDA device (default: torch's current one)."""
        if backend not in _BACKENDS:
            raise CcoInvalidArgumentError(f"backend={backend!r} is not one of {sorted(_BACKENDS)}")
        for name, value in (("nranks", nranks), ("rank", rank), ("per_rank_vmm", per_rank_vmm)):
            if not isinstance(value, int) or value < 0:
                raise CcoInvalidArgumentError(f"{name}={value!r} must be a non-negative int")
        if not 0 <= rank < nranks:
            raise CcoInvalidArgumentError(f"rank={rank} is outside [0, nranks={nranks})")
        if device is None:
            device = _current_cuda_device() if backend != "cpu" else -1
        raw = bytes(unique_id)
        _note_no_effect_variables()
        native = _C.comm_create(raw, nranks, rank, per_rank_vmm, _BACKENDS[backend], device)
        comm = cls(native)
        logger.debug("rank %d/%d joined a %s communicator", rank, nranks, comm.backend)
        return comm

    # ---- properties ----
    @property
    def is_valid(self) -> bool:
        return self._native is not None

    def _live(self) -> Any:
        if self._native is None:
            raise CcoInvalidArgumentError("the communicator was destroyed")
        return self._native

    def _fact(self, name: str) -> Any:
        self._live()
        return self._info[name]

    rank = property(lambda self: self._fact("rank"))
    nranks = property(lambda self: self._fact("nranks"))
    lsa_rank = property(lambda self: self._fact("lsa_rank"))
    lsa_size = property(lambda self: self._fact("lsa_size"))
    node = property(lambda self: self._fact("node"))
    num_nodes = property(lambda self: self._fact("num_nodes"))
    #: Ranks of this communicator on this machine (they share its GPUs).
    host_ranks = property(lambda self: self._fact("host_ranks"))
    backend = property(lambda self: self._fact("backend"))
    device = property(lambda self: self._fact("device"))
    flat_base = property(lambda self: self._fact("flat_base"))
    per_rank_size = property(lambda self: self._fact("per_rank_size"))

    @property
    def ptr(self) -> int:
        """This rank's slot address (MORI's handle of the native communicator)."""
        return int(self._fact("own_slot"))

    def __repr__(self) -> str:
        if self._native is None:
            return "Communicator(destroyed)"
        return f"Communicator(rank={self.rank}, nranks={self.nranks}, backend={self.backend!r})"

    # ---- memory and windows ----
    def alloc_mem(self, size: int, alignment: int = 256) -> AllocatedMemory:
        """COLLECTIVE: ``size`` bytes at the same offset of every rank's slot."""
        if size < 0:
            raise CcoInvalidArgumentError(f"size={size} must not be negative")
        mem = AllocatedMemory(_C.mem_alloc(self._live(), size, alignment), size)
        self._allocations.append(mem)
        return mem

    def free_mem(self, mem: AllocatedMemory | int) -> None:
        """COLLECTIVE: frees an allocation (and the windows registered in it)."""
        ptr = mem.ptr if isinstance(mem, AllocatedMemory) else int(mem)
        _C.mem_free(self._live(), ptr)
        self._allocations = [m for m in self._allocations if m.ptr != ptr]

    def register_window(self, ptr: int | None = None, size: int | None = None) -> RegisteredWindow:
        """COLLECTIVE: registers ``[ptr, ptr + size)`` of an allocation; with ``ptr=None``
        allocates ``size`` bytes first (MORI's size-only overload)."""
        if size is None:
            raise CcoInvalidArgumentError("size is required")
        if ptr is None:
            ptr = self.alloc_mem(size).ptr
        offset, length = _C.window_register_ptr(self._live(), ptr, size)
        return RegisteredWindow(Window(offset, length), ptr, length)

    def deregister_window(self, window: RegisteredWindow) -> None:
        _C.window_deregister(self._live(), window.handle.offset, window.handle.size)

    def get_peer_ptr(self, local_ptr: int, pe: int) -> int:
        """The address through which this rank loads and stores rank ``pe``'s copy of ``local_ptr``."""
        return int(_C.get_peer_ptr(self._live(), local_ptr, pe))

    def tensor(self, shape: Sequence[int], dtype: Any) -> Any:
        """COLLECTIVE: a torch tensor over new symmetric memory of this communicator."""
        import torch

        torch_dtype = getattr(torch, str(dtype).removeprefix("torch."))
        nbytes = max(1, int(torch.Size(shape).numel()) * torch.empty((), dtype=torch_dtype).element_size())
        mem = self.alloc_mem(nbytes)
        return tensor_at(mem.ptr, shape, torch_dtype, self.device)

    def peer_tensor(self, tensor: Any, pe: int) -> Any:
        """Rank ``pe``'s copy of a tensor made by :meth:`tensor`, as a tensor this rank can use."""
        return tensor_at(self.get_peer_ptr(tensor.data_ptr(), pe), tensor.shape, tensor.dtype, self.device)

    # ---- device communicators ----
    def create_dev_comm(self, reqs: CCODevCommRequirements | None = None) -> DevCommHandle:
        """COLLECTIVE: a device communicator with the resources ``reqs`` asks for."""
        raw = _C.dev_comm_create(self._live(), _check_requirements(reqs or CCODevCommRequirements()))
        dc = DevComm.from_buffer_copy(raw)
        return DevCommHandle(raw, dc.rank, dc.world_size, dc.lsa_size, dc.lsa_rank, dc.flat_base, dc.per_rank_size)

    def destroy_dev_comm(self, handle: DevCommHandle) -> None:
        """COLLECTIVE."""
        _C.dev_comm_destroy(self._live(), handle.raw)

    def check_device_error(self, handle: DevCommHandle, *, clear: bool = True) -> None:
        """Raises CcoDeviceError when a kernel reported an error through ``handle`` (synchronise
        the kernels first)."""
        code = _C.dev_comm_error(self._live(), handle.raw, clear)
        if code:
            raise CcoDeviceError(f"a kernel of rank {self.rank} reported: {ERROR_NAMES.get(code, f'code {code}')}")

    def barrier(self) -> None:
        """COLLECTIVE: a host barrier over the communicator's bootstrap network."""
        _C.barrier_all(self._live())

    # ---- copy engine ----
    def copy_engine_put(
        self,
        handle: DevCommHandle,
        peer: int,
        dst: RegisteredWindow,
        dst_offset: int,
        src: RegisteredWindow,
        src_offset: int,
        nbytes: int,
        queue: int = 0,
    ) -> int:
        """Copies ``nbytes`` of this rank's ``src`` window into LSA rank ``peer``'s ``dst`` window
        on a copy-engine queue (no compute units on the GPU), then bumps the peer's copy-engine
        signal for (this rank, queue). Returns the value that signal reaches; the peer waits with
        :meth:`copy_engine_wait` or the device call ``ce_wait_signal``."""
        return int(
            _C.copy_engine_put(
                self._live(),
                handle.raw,
                peer,
                queue,
                dst.pair,
                dst_offset,
                src.pair,
                src_offset,
                nbytes,
            )
        )

    def copy_engine_quiet(self, peer: int = -1, queue: int = -1) -> None:
        """Waits until this rank's copy-engine puts (to ``peer`` on ``queue``; -1: all) completed."""
        _C.copy_engine_quiet(self._live(), peer, queue)

    def copy_engine_wait(self, handle: DevCommHandle, src_peer: int, queue: int, expected: int) -> None:
        """Waits until LSA rank ``src_peer``'s puts on ``queue`` reached ``expected``: on the cpu
        backend the calling thread waits; on cuda torch's current stream does (cuStreamWaitValue64),
        so later work on it sees the bytes without blocking the host."""
        dc = handle.struct
        if not 0 <= src_peer < dc.lsa_size or not 0 <= queue < dc.ce_queue_count:
            raise CcoInvalidArgumentError(
                f"(src_peer={src_peer}, queue={queue}) is outside [0, {dc.lsa_size}) x [0, {dc.ce_queue_count})"
            )
        offset = dc.ce_signal_offset + 8 * (src_peer * dc.ce_queue_count + queue)
        self._wait_word(handle.resource_address(dc.lsa_rank, offset), expected, dc)

    # ---- GDA: ranks on other nodes ----
    @property
    def gda_conduit(self) -> str:
        """The remote transport that carries GDA requests ("tcp" or "ucx"); "" on one node."""
        return str(self._fact("gda_conduit"))

    def gda_put(
        self,
        handle: DevCommHandle,
        peer: int,
        dst: RegisteredWindow,
        dst_offset: int,
        src: RegisteredWindow,
        src_offset: int,
        nbytes: int,
        *,
        signal_id: int = -1,
        signal_value: int = 1,
    ) -> None:
        """Copies ``nbytes`` of this rank's ``src`` window into rank ``peer``'s ``dst`` window,
        ``peer`` being on another node; with ``signal_id`` the peer's signal then gets
        ``+= signal_value``, after the data. Returns once ``src`` may be reused; the bytes are at
        the peer after :meth:`gda_flush` (or once the peer sees the signal)."""
        _C.gda_put(
            self._live(),
            handle.raw,
            peer,
            dst.pair,
            dst_offset,
            src.pair,
            src_offset,
            nbytes,
            signal_id,
            signal_value,
        )

    def gda_get(
        self, peer: int, src: RegisteredWindow, src_offset: int, dst: RegisteredWindow, dst_offset: int, nbytes: int
    ) -> None:
        """Copies ``nbytes`` of rank ``peer``'s ``src`` window (another node) into this rank's
        ``dst`` window; the bytes are there when it returns."""
        _C.gda_get(
            self._live(),
            peer,
            src.pair,
            src_offset,
            dst.pair,
            dst_offset,
            nbytes,
        )

    def gda_signal(self, handle: DevCommHandle, peer: int, signal_id: int, value: int = 1) -> None:
        """Rank ``peer``'s (another node) signal ``signal_id`` gets ``+= value``. It is not
        ordered after this rank's earlier puts (they may travel on other connections): to tell a
        peer that data has landed, give the put a ``signal_id``, or call :meth:`gda_flush` first."""
        _C.gda_signal(self._live(), handle.raw, peer, signal_id, value)

    def gda_flush(self) -> None:
        """Every GDA request issued before it, by host threads or kernels, is applied at its target."""
        _C.gda_flush(self._live())

    def read_signal(self, handle: DevCommHandle, signal_id: int) -> int:
        """This rank's signal ``signal_id`` now."""
        return int(_C.read_signal(self._live(), handle.raw, signal_id))

    def wait_signal(self, handle: DevCommHandle, signal_id: int, least: int) -> None:
        """Waits until this rank's signal ``signal_id`` is at least ``least``: on the cpu backend
        the calling thread waits (``CcoTimeoutError`` after ``MORI_CCO_TIMEOUT``); on cuda torch's
        current stream does, so later work on it sees the data."""
        dc = handle.struct
        if not 0 <= signal_id < dc.signal_count:
            raise CcoInvalidArgumentError(f"signal_id={signal_id} is outside [0, gda_signal_count={dc.signal_count})")
        self._wait_word(handle.resource_address(dc.lsa_rank, dc.signal_offset + 8 * signal_id), least, dc)

    def _wait_word(self, address: int, least: int, dc: DevComm) -> None:
        if self.backend == "cpu":
            _C.wait_at_least(address, least, dc.spin_timeout_ns)
            return
        import torch

        from mori.shmem.jit import driver

        stream = torch.cuda.current_stream(self.device).cuda_stream
        wait_geq = 0  # CU_STREAM_WAIT_VALUE_GEQ
        driver.driver().call(
            "cuStreamWaitValue64_v2",
            ctypes.c_void_p(stream),
            ctypes.c_uint64(address),
            ctypes.c_uint64(least),
            ctypes.c_uint(wait_geq),
        )

    # ---- collectives ----
    def _engine(self) -> Any:
        with self._lock:
            if self._collectives is None:
                if self.num_nodes > 1:
                    from mori.cco.cross_node import CrossNodeCollectives

                    self._collectives = CrossNodeCollectives(self)
                else:
                    from mori.cco.collectives import CollectiveEngine

                    self._collectives = CollectiveEngine(self)
            return self._collectives

    def all_reduce(
        self,
        tensor: Any,
        op: str = "sum",
        *,
        out: Any = None,
        algorithm: str = "auto",
        wire_dtype: Any = None,
    ) -> Any:
        """COLLECTIVE: ``out`` (default: ``tensor``, in place) = the reduction of every rank's
        ``tensor``. ``algorithm``: "one_shot" (every rank reads every peer), "two_shot"
        (reduce-scatter then all-gather) or "auto" (one-shot up to ``MORI_CCO_ONE_SHOT_MAX``).
        ``wire_dtype="fp8"`` (or torch.float8_e4m3fn) sends e4m3 with a float32 scale per 128
        elements and sums in float32 (sum only)."""
        return self._engine().all_reduce(tensor, op, out=out, algorithm=algorithm, wire_dtype=wire_dtype)

    def all_gather(self, output: Any, input: Any) -> Any:
        """COLLECTIVE: ``output`` (world * input.numel() elements) = every rank's ``input``, in rank order."""
        return self._engine().all_gather(output, input)

    def all_to_all(self, output: Any, input: Any) -> Any:
        """COLLECTIVE: chunk j of ``input`` goes to rank j; chunk i of ``output`` comes from rank i."""
        return self._engine().all_to_all(output, input)

    # ---- lifetime ----
    def destroy(self) -> None:
        """COLLECTIVE: frees every allocation, window and dev comm, then leaves the communicator."""
        if self._native is None:
            return
        try:
            if self._collectives is not None:
                self._collectives.close()
        finally:
            self._collectives = None
            native, self._native = self._native, None
            _C.barrier_all(native)
            _C.comm_destroy(native)  # unmaps the slots and leaves the bootstrap group

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def _current_cuda_device() -> int:
    try:
        import torch
    except ImportError:
        return -1
    return int(torch.cuda.current_device()) if torch.cuda.is_available() else -1
