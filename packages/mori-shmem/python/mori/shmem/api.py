# SPDX-License-Identifier: MIT
"""The host API of mori.shmem, with MORI's names and semantics.

Addresses are Python ints. A *symmetric address* is one inside this PE's mapping of the heap
(what ``shmem_malloc`` returned); remote operations take it plus the target PE. Calls documented
as collective must be made by every PE in the same order.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from mori.shmem import arguments as arg
from mori.shmem._native import _C
from mori.shmem.dtypes import from_bits, int_type_code, to_bits
from mori.shmem.errors import InvalidArgumentError, InvalidArgumentTypeError
from mori.shmem.no_effect import note_init_settings, note_malloc_flags
from mori.shmem.settings import is_set, provide_ucx_dir, setting

logger = logging.getLogger("mori.shmem")

MORI_SHMEM_INIT_WITH_MPI_COMM = 0
MORI_SHMEM_INIT_WITH_UNIQUEID = 1
UNIQUE_ID_BYTES = 128

# MORI_SHMEM_REMOTE_STREAMS as init read it (shmem_num_qp_per_pe reports it; the environment may
# change after init).
_streams_at_init = 0


class AmoType(enum.IntEnum):
    """Atomic operation codes (MORI's ``core::atomicType`` numbering)."""

    INC = 2
    SET = 3
    ADD = 4
    AND = 5
    OR = 6
    XOR = 7
    SIGNAL_SET = 9
    SIGNAL_ADD = 10
    FETCH = 12
    FETCH_INC = 13
    FETCH_ADD = 14
    FETCH_AND = 15
    FETCH_OR = 16
    FETCH_XOR = 17
    SWAP = 18
    COMPARE_SWAP = 19


_FETCHING = {
    AmoType.FETCH,
    AmoType.FETCH_INC,
    AmoType.FETCH_ADD,
    AmoType.FETCH_AND,
    AmoType.FETCH_OR,
    AmoType.FETCH_XOR,
    AmoType.SWAP,
    AmoType.COMPARE_SWAP,
}


class CmpOp(enum.IntEnum):
    """Comparison operators of ``shmem_wait_until`` and ``shmem_test``."""

    EQ = 0
    NE = 1
    GT = 2
    LE = 3
    LT = 4
    GE = 5


@dataclass(frozen=True)
class HeapInfo:
    """A snapshot of this PE's symmetric heap."""

    base: int
    size: int
    reserved: int
    used: int
    largest_free: int
    num_allocations: int
    backend: str


# ---- lifetime ----------------------------------------------------------------------------------


def shmem_get_unique_id() -> bytes:
    """A fresh 128-byte unique id: the rendezvous address plus a random job secret.

    Make it once (in rank 0 or in the launcher) and hand it to every PE.
    """
    uid: bytes = _C.get_unique_id()
    return uid


def shmem_init_attr(flags: int, rank: int, nranks: int, unique_id: Any) -> int:
    """Collective: joins the job as PE ``rank`` of ``nranks``.

    ``flags`` is ``MORI_SHMEM_INIT_WITH_UNIQUEID`` (``unique_id`` is the bytes from
    ``shmem_get_unique_id``) or ``MORI_SHMEM_INIT_WITH_MPI_COMM`` (``unique_id`` is an mpi4py
    communicator, or None for COMM_WORLD; rank/nranks may be -1 to take them from it).
    """
    flags = arg.c_int("flags", flags)
    rank, nranks = arg.c_int("rank", rank), arg.c_int("nranks", nranks)
    if flags == MORI_SHMEM_INIT_WITH_MPI_COMM:
        from mori.shmem.frameworks import init_with_mpi_comm

        return init_with_mpi_comm(unique_id, rank, nranks)
    if flags != MORI_SHMEM_INIT_WITH_UNIQUEID:
        raise InvalidArgumentError(
            f"flags={flags} is not an init flag (MORI_SHMEM_INIT_WITH_MPI_COMM=0, MORI_SHMEM_INIT_WITH_UNIQUEID=1)"
        )
    if not isinstance(unique_id, (bytes, bytearray)):
        raise InvalidArgumentTypeError(
            f"unique_id must be bytes from shmem_get_unique_id, got {type(unique_id).__name__}"
        )
    provide_ucx_dir()
    global _streams_at_init
    _streams_at_init = _remote_streams()
    _C.init_uniqueid(rank, nranks, bytes(unique_id))
    logger.debug("PE %d of %d initialized", rank, nranks)
    note_init_settings(shmem_remote_conduit())
    _warn_of_proxy_hazards()
    return 0


def _warn_of_proxy_hazards() -> None:
    """Where PEs on other hosts reach this GPU through the device proxy: say what CUDA setting of
    this process can stall their waits (mori.shmem.proxy_hazards)."""
    from mori.shmem.proxy_hazards import device_proxy_hazards

    for hazard in device_proxy_hazards():
        logger.warning(
            "PE %d: PEs on other hosts reach this GPU through the device proxy, and %s; set it before CUDA starts",
            shmem_mype(),
            hazard,
        )


def shmem_finalize() -> int:
    """Collective: leaves the job, unmapping the heap; init may run again afterwards."""
    _C.finalize()
    return 0


def shmem_is_initialized() -> bool:
    return bool(_C.is_initialized())


def shmem_mype() -> int:
    """This PE's number."""
    pe: int = _C.my_pe()
    return pe


def shmem_npes() -> int:
    """The number of PEs in the job."""
    n: int = _C.n_pes()
    return n


def _remote_streams() -> int:
    """The tcp conduit's connections per remote PE as init resolves them (src/core/state.cpp):
    MORI_SHMEM_REMOTE_STREAMS when set, else MORI's MORI_NUM_QP_PER_PE when set, else the default."""
    if not is_set("MORI_SHMEM_REMOTE_STREAMS") and int(setting("MORI_NUM_QP_PER_PE")) != 0:
        return int(setting("MORI_NUM_QP_PER_PE"))
    return int(setting("MORI_SHMEM_REMOTE_STREAMS"))


def shmem_num_qp_per_pe() -> int:
    """MORI's queue pairs per PE: the connections this PE's remote transport keeps to each remote PE.

    ``MORI_SHMEM_REMOTE_STREAMS`` (else MORI's ``MORI_NUM_QP_PER_PE``) with the tcp conduit (or
    when no PE is remote), 1 with the ucx
    conduit (one UCP endpoint per PE, whose lanes UCX chooses). Raises NotInitializedError before
    init, as MORI's does.
    """
    shmem_mype()  # NotInitializedError before init
    return 1 if shmem_remote_conduit() == "ucx" else _streams_at_init


def shmem_backend() -> str:
    """The backend the heap lives on, ``"cpu"`` or ``"cuda"``; before init, the one init would pick."""
    name: str = _C.backend()
    return name


def shmem_barrier_all() -> None:
    """Collective host barrier over the bootstrap network; completes this PE's RMA first."""
    _C.barrier_all()


def shmem_bootstrap_allgather(data: bytes) -> list[bytes]:
    """Collective: every PE's ``data`` (all of the same length), indexed by PE."""
    data = arg.data_bytes("data", data)
    gathered: bytes = _C.bootstrap_allgather(data)
    size = len(data)
    return [gathered[pe * size : (pe + 1) * size] for pe in range(shmem_npes())]


def shmem_bootstrap_broadcast(data: bytes, root: int = 0) -> bytes:
    """Collective: PE ``root``'s ``data`` on every PE (all pass buffers of the same length)."""
    result: bytes = _C.bootstrap_broadcast(arg.data_bytes("data", data), arg.c_int("root", root))
    return result


# ---- heap --------------------------------------------------------------------------------------


def shmem_malloc(size: int) -> int:
    """Collective: ``size`` bytes of symmetric memory (256-byte aligned); 0 when size is 0."""
    ptr: int = _C.malloc_align(256, arg.size("size", size))
    return ptr


def shmem_malloc_align(alignment: int, size: int) -> int:
    """Collective: like ``shmem_malloc`` with ``alignment`` (a power of two); size is rounded up."""
    size = arg.size("size", size)
    alignment = arg.size("alignment", alignment)
    if alignment <= 0 or alignment & (alignment - 1):
        raise InvalidArgumentError(f"alignment={alignment} is not a power of two")
    ptr: int = _C.malloc_align(alignment, size)
    return ptr


def shmem_ext_malloc_with_flags(size: int, flags: int) -> int:
    """Collective: as ``shmem_malloc``; the heap has one memory type, so flags are accepted and have no
    effect (logged once when non-zero)."""
    flags = arg.integer("flags", flags, 0, arg.UINT_MAX)
    ptr: int = _C.ext_malloc_with_flags(arg.size("size", size), flags)
    note_malloc_flags(flags)
    return ptr


def shmem_free(ptr: int) -> None:
    """Collective: returns ``ptr`` to the heap; 0 is a no-op."""
    _C.free(arg.address("ptr", ptr))


def shmem_heap_info() -> HeapInfo:
    return HeapInfo(**_C.heap_info())


def shmem_buffer_register(ptr: int, size: int) -> int:
    """Registers local memory as a transfer source/target; overlapping registrations are refused."""
    _C.buffer_register(arg.address("ptr", ptr), arg.size("size", size))
    return 0


def shmem_buffer_deregister(ptr: int, size: int) -> int:
    _C.buffer_deregister(arg.address("ptr", ptr), arg.size("size", size))
    return 0


def shmem_ptr_p2p(dest_ptr: int, my_pe: int, dest_pe: int) -> int:
    """The address of ``dest_pe``'s copy of symmetric address ``dest_ptr``.

    ``dest_ptr`` itself when ``dest_pe == my_pe``; 0 when ``dest_ptr`` is outside the heap or
    ``dest_pe`` is reached through the remote transport (no load/store mapping).
    """
    ptr: int = _C.ptr_p2p(arg.address("dest_ptr", dest_ptr), arg.c_int("my_pe", my_pe), arg.c_int("dest_pe", dest_pe))
    return ptr


_TRANSPORTS = ("self", "p2p", "remote")


def shmem_pe_transport(pe: int) -> str:
    """How this PE reaches ``pe``: ``"self"``, ``"p2p"`` (load/store through a mapping of its heap)
    or ``"remote"`` (the remote transport: another host, MORI_SHMEM_PES_PER_NODE, MORI_NODE_ID or
    MORI_DISABLE_P2P; :func:`shmem_remote_conduit` says which conduit carries it)."""
    return _TRANSPORTS[_C.pe_transport(arg.c_int("pe", pe))]


def shmem_remote_endpoint() -> str | None:
    """How this PE is reached through the remote transport, or None when no PE of the job is remote:
    ``"ip:port"`` of its server with the tcp conduit, ``"ucx:<worker id> <transport/device>+..."``
    with the ucx conduit (the UCX transports of its endpoints)."""
    endpoint: str = _C.remote_endpoint()
    return endpoint or None


def shmem_remote_conduit() -> str | None:
    """Which conduit carries the remote transport (MORI_SHMEM_REMOTE_CONDUIT decides): ``"tcp"`` or
    ``"ucx"``; None when no PE of the job is remote."""
    endpoint = shmem_remote_endpoint()
    if endpoint is None:
        return None
    return "ucx" if endpoint.startswith("ucx:") else "tcp"


# ---- host RMA ----------------------------------------------------------------------------------


def shmem_putmem(dest: int, src: int, nbytes: int, pe: int) -> None:
    """Copies ``nbytes`` from local ``src`` to symmetric ``dest`` on PE ``pe``."""
    _C.putmem(arg.address("dest", dest), arg.address("src", src), arg.size("nbytes", nbytes), arg.c_int("pe", pe))


def shmem_getmem(dest: int, src: int, nbytes: int, pe: int) -> None:
    """Copies ``nbytes`` from symmetric ``src`` on PE ``pe`` to local ``dest``."""
    _C.getmem(arg.address("dest", dest), arg.address("src", src), arg.size("nbytes", nbytes), arg.c_int("pe", pe))


def _on_gpu_heap() -> bool:
    return bool(_C.is_initialized()) and _C.backend() == "cuda"


def _check_signal_op(sig_op: int) -> None:
    if isinstance(sig_op, bool) or not isinstance(sig_op, int):
        raise InvalidArgumentTypeError(f"sig_op must be AmoType.SIGNAL_SET or SIGNAL_ADD, got {sig_op!r}")
    if sig_op not in (AmoType.SIGNAL_SET, AmoType.SIGNAL_ADD):
        raise InvalidArgumentError(f"sig_op={sig_op} must be AmoType.SIGNAL_SET (9) or AmoType.SIGNAL_ADD (10)")


def shmem_putmem_signal(dest: int, src: int, nbytes: int, sig_addr: int, signal: int, sig_op: int, pe: int) -> None:
    """Put, then update the uint64 signal at ``sig_addr`` on ``pe``; the data is visible before the signal."""
    dest, src, sig_addr = arg.address("dest", dest), arg.address("src", src), arg.address("sig_addr", sig_addr)
    nbytes, pe = arg.size("nbytes", nbytes), arg.c_int("pe", pe)
    _check_signal_op(sig_op)
    _, uint64 = int_type_code(np.uint64)
    if sig_op == AmoType.SIGNAL_ADD and _on_gpu_heap():
        # Host code cannot add to GPU memory atomically: the data copy completes, then a kernel adds.
        _C.putmem(dest, src, nbytes, pe)
        shmem_atomic(sig_addr, AmoType.SIGNAL_ADD, signal, pe)
        return
    _C.putmem_signal(dest, src, nbytes, sig_addr, to_bits(signal, uint64, "signal"), int(sig_op), pe)


def shmem_signal_op(sig_addr: int, signal: int, sig_op: int, pe: int) -> None:
    """Sets or adds to the uint64 signal at ``sig_addr`` on ``pe`` (release ordering)."""
    sig_addr, pe = arg.address("sig_addr", sig_addr), arg.c_int("pe", pe)
    _check_signal_op(sig_op)
    _, uint64 = int_type_code(np.uint64)
    if sig_op == AmoType.SIGNAL_ADD and _on_gpu_heap():
        shmem_atomic(sig_addr, AmoType.SIGNAL_ADD, signal, pe)
        return
    _C.signal_op(sig_addr, to_bits(signal, uint64, "signal"), int(sig_op), pe)


def shmem_signal_fetch(sig_addr: int) -> int:
    """Reads this PE's uint64 signal at ``sig_addr`` (acquire ordering)."""
    value = shmem_atomic(arg.address("sig_addr", sig_addr), AmoType.FETCH, 0, shmem_mype())
    assert value is not None
    return value


def shmem_atomic(
    dest: int, op: AmoType | int, value: int, pe: int, *, compare: int = 0, dtype: Any = np.uint64
) -> int | None:
    """Atomic ``op`` on the integer at symmetric ``dest`` on ``pe``.

    Returns the old value for fetching operations (FETCH*, SWAP, COMPARE_SWAP), else None.
    """
    dest, pe = arg.address("dest", dest), arg.c_int("pe", pe)
    if isinstance(op, bool) or not isinstance(op, int):
        raise InvalidArgumentTypeError(f"op must be an AmoType, got {type(op).__name__} {op!r}")
    try:
        amo = AmoType(op)
    except (ValueError, TypeError):
        raise InvalidArgumentError(
            f"op={op} is not an AmoType ({', '.join(f'{a.name}={a.value}' for a in AmoType)})"
        ) from None
    type_code, resolved = int_type_code(dtype)
    value_bits, compare_bits = to_bits(value, resolved, "value"), to_bits(compare, resolved, "compare")
    if _on_gpu_heap():
        from mori.shmem.device import device_atomic

        old = device_atomic(dest, int(amo), type_code, value_bits, compare_bits, pe)
    else:
        old = _C.atomic(dest, int(amo), type_code, value_bits, compare_bits, pe)
    return from_bits(old, resolved) if amo in _FETCHING else None


def shmem_atomic_add(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> None:
    shmem_atomic(dest, AmoType.ADD, value, pe, dtype=dtype)


def shmem_atomic_inc(dest: int, pe: int, dtype: Any = np.uint64) -> None:
    shmem_atomic(dest, AmoType.INC, 0, pe, dtype=dtype)


def shmem_atomic_set(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> None:
    shmem_atomic(dest, AmoType.SET, value, pe, dtype=dtype)


def shmem_atomic_and(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> None:
    shmem_atomic(dest, AmoType.AND, value, pe, dtype=dtype)


def shmem_atomic_or(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> None:
    shmem_atomic(dest, AmoType.OR, value, pe, dtype=dtype)


def shmem_atomic_xor(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> None:
    shmem_atomic(dest, AmoType.XOR, value, pe, dtype=dtype)


def _fetching(dest: int, op: AmoType, value: int, pe: int, dtype: Any, compare: int = 0) -> int:
    old = shmem_atomic(dest, op, value, pe, compare=compare, dtype=dtype)
    assert old is not None
    return old


def shmem_atomic_fetch(dest: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.FETCH, 0, pe, dtype)


def shmem_atomic_fetch_add(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.FETCH_ADD, value, pe, dtype)


def shmem_atomic_fetch_inc(dest: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.FETCH_INC, 0, pe, dtype)


def shmem_atomic_fetch_and(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.FETCH_AND, value, pe, dtype)


def shmem_atomic_fetch_or(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.FETCH_OR, value, pe, dtype)


def shmem_atomic_fetch_xor(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.FETCH_XOR, value, pe, dtype)


def shmem_atomic_swap(dest: int, value: int, pe: int, dtype: Any = np.uint64) -> int:
    return _fetching(dest, AmoType.SWAP, value, pe, dtype)


def shmem_atomic_compare_swap(dest: int, compare: int, value: int, pe: int, dtype: Any = np.uint64) -> int:
    """Stores ``value`` if the current value equals ``compare``; returns the old value either way."""
    return _fetching(dest, AmoType.COMPARE_SWAP, value, pe, dtype, compare=compare)


def _cmp(cmp: CmpOp | int) -> int:
    if isinstance(cmp, bool) or not isinstance(cmp, int):
        raise InvalidArgumentTypeError(f"cmp must be a CmpOp, got {type(cmp).__name__} {cmp!r}")
    try:
        return int(CmpOp(cmp))
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"cmp={cmp} is not a CmpOp (EQ=0, NE=1, GT=2, LE=3, LT=4, GE=5)") from None


def shmem_wait_until(
    ivar: int, cmp: CmpOp | int, value: int, *, dtype: Any = np.uint64, timeout: float | None = None
) -> int:
    """Blocks until this PE's integer at symmetric ``ivar`` satisfies ``ivar <cmp> value``.

    Returns the value that satisfied it. ``timeout`` is in seconds (None: MORI_SHMEM_WAIT_TIMEOUT);
    expiry raises WaitTimeoutError.
    """
    ivar = arg.address("ivar", ivar)
    type_code, resolved = int_type_code(dtype)
    # The bound keeps milliseconds inside int64 (about 292 million years).
    timeout_ms = -1 if timeout is None else int(arg.real("timeout", timeout, 0.0, 9.2e15) * 1000)
    observed = _C.wait_until(ivar, type_code, _cmp(cmp), to_bits(value, resolved, "value"), timeout_ms)
    return from_bits(observed, resolved)


def shmem_test(ivar: int, cmp: CmpOp | int, value: int, *, dtype: Any = np.uint64) -> bool:
    """One non-blocking check of the ``shmem_wait_until`` condition."""
    ivar = arg.address("ivar", ivar)
    type_code, resolved = int_type_code(dtype)
    return bool(_C.test(ivar, type_code, _cmp(cmp), to_bits(value, resolved, "value")))


def shmem_fence() -> None:
    """Orders this PE's earlier puts to each PE before its later ones."""
    _C.fence()


def shmem_quiet() -> None:
    """Completes every outstanding put, get and atomic of this PE."""
    _C.quiet()


def parse_size(text: str) -> int:
    """Bytes in a size string such as ``"6G"``, ``"512M"``, ``"1.5GiB"`` or ``"4096"``."""
    size: int = _C.parse_size(arg.text("text", text))
    return size


__all__ = [
    "MORI_SHMEM_INIT_WITH_MPI_COMM",
    "MORI_SHMEM_INIT_WITH_UNIQUEID",
    "UNIQUE_ID_BYTES",
    "AmoType",
    "CmpOp",
    "HeapInfo",
    "parse_size",
    "shmem_atomic",
    "shmem_atomic_add",
    "shmem_atomic_and",
    "shmem_atomic_compare_swap",
    "shmem_atomic_fetch",
    "shmem_atomic_fetch_add",
    "shmem_atomic_fetch_and",
    "shmem_atomic_fetch_inc",
    "shmem_atomic_fetch_or",
    "shmem_atomic_fetch_xor",
    "shmem_atomic_inc",
    "shmem_atomic_or",
    "shmem_atomic_set",
    "shmem_atomic_swap",
    "shmem_atomic_xor",
    "shmem_backend",
    "shmem_barrier_all",
    "shmem_bootstrap_allgather",
    "shmem_bootstrap_broadcast",
    "shmem_buffer_deregister",
    "shmem_buffer_register",
    "shmem_ext_malloc_with_flags",
    "shmem_fence",
    "shmem_finalize",
    "shmem_free",
    "shmem_get_unique_id",
    "shmem_getmem",
    "shmem_heap_info",
    "shmem_init_attr",
    "shmem_is_initialized",
    "shmem_malloc",
    "shmem_malloc_align",
    "shmem_mype",
    "shmem_npes",
    "shmem_num_qp_per_pe",
    "shmem_pe_transport",
    "shmem_ptr_p2p",
    "shmem_putmem",
    "shmem_putmem_signal",
    "shmem_quiet",
    "shmem_remote_conduit",
    "shmem_remote_endpoint",
    "shmem_signal_fetch",
    "shmem_signal_op",
    "shmem_test",
    "shmem_wait_until",
]
