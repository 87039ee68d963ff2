# SPDX-License-Identifier: MIT
"""The host side of mori-shmem's device API (cuda backend).

Kernels reach the symmetric heap through ``mori_shmem_device_state_t``
(include/mori_shmem/device_state.h): pass :func:`shmem_device_state` by value as a kernel argument,
or copy it into a loaded module's global with :func:`shmem_module_init`. Device-side spins are
bounded; :func:`shmem_check_device_error` turns an expired one into an exception.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from mori.shmem import api
from mori.shmem._native import _C
from mori.shmem.errors import InvalidArgumentError, InvalidPointerError, PeOutOfRangeError, WaitTimeoutError

#: The module global that device code reads when it is not handed the state as an argument.
DEVICE_STATE_SYMBOL = "mori_shmem_device_state"

# Offsets of device_state.h's sync words, as a byte offset from the heap base.
_SYNC_SCRATCH_OFFSET = 16

_DEVICE_ERR_WAIT_TIMEOUT = 1
_DEVICE_ERR_UNREACHABLE_PE = 2
_DEVICE_ERR_INVALID_ARGUMENT = 3
_DEVICE_ERR_BAD_ADDRESS = 4


class DeviceState(ctypes.Structure):
    """``mori_shmem_device_state_t`` (device_state.h); keep the two in step."""

    _fields_ = [
        ("version", ctypes.c_uint32),
        ("my_pe", ctypes.c_int32),
        ("n_pes", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("heap_base", ctypes.c_uint64),
        ("heap_size", ctypes.c_uint64),
        ("peer_bases", ctypes.c_uint64),
        ("spin_timeout_ns", ctypes.c_uint64),
        ("peer_base", ctypes.c_uint64 * 8),  # MORI_SHMEM_DEVICE_INLINE_PEERS
        ("proxy_ring", ctypes.c_uint64),
    ]


def shmem_cuda_available() -> bool:
    """Whether the cuda backend can run here: a CUDA driver loads and a GPU is visible.

    Creates no CUDA context, so a launcher can ask before it starts its PEs.
    """
    return bool(_C.cuda_available())


def shmem_cuda_device() -> int:
    """The CUDA device ordinal of this PE's heap (pass it to ``torch.cuda.set_device``)."""
    return _C.cuda_device()


def shmem_device_state() -> DeviceState:
    """This PE's device state, to pass by value to kernels that take ``mori_shmem_device_state_t``."""
    raw = _C.get_device_state()
    if len(raw) != ctypes.sizeof(DeviceState):
        raise RuntimeError(f"libmori_shmem's device state is {len(raw)} bytes, this module expects "
                           f"{ctypes.sizeof(DeviceState)}: mismatched mori-shmem installation")  # fmt: skip
    return DeviceState.from_buffer_copy(raw)


def shmem_module_init(module: Any) -> int:
    """Copies the device state into ``module``'s ``mori_shmem_device_state`` global.

    ``module`` is a :class:`mori.shmem.jit.Module` (or anything with ``write_global``), or a raw
    ``CUmodule`` handle as an int (what Triton's ``CompiledKernel.module`` holds), which must be
    loaded in the current context. Returns 0, or -1 when the module has no such symbol (it does
    not use the global form of the device API), as MORI's ``shmem_module_init`` does.
    """
    from mori.shmem.jit import driver
    from mori.shmem.jit.errors import JitSymbolNotFoundError

    data = bytes(shmem_device_state())
    if isinstance(module, int):
        if module == 0:
            raise InvalidArgumentError("shmem_module_init: module handle is 0 (not loaded)")
        found = driver.module_global(module, DEVICE_STATE_SYMBOL)
        if found is None:
            return -1
        address, size = found
        if size != len(data):
            raise InvalidArgumentError(
                f"shmem_module_init: the module's {DEVICE_STATE_SYMBOL} is {size} bytes, this mori-shmem's "
                f"state is {len(data)}: the module was built against another mori-shmem version"
            )
        driver.memcpy_htod(address, data)
        return 0
    try:
        module.write_global(DEVICE_STATE_SYMBOL, data)
    except JitSymbolNotFoundError:
        return -1
    return 0


def shmem_check_device_error() -> None:
    """Raises the error a kernel recorded (bounded spin expired, unreachable PE) and clears it.

    Synchronise the kernels first; the word records the first error since the last check.
    """
    code = _C.device_error(True)
    if code == _DEVICE_ERR_WAIT_TIMEOUT:
        raise WaitTimeoutError(
            "a device-side wait (wait_until or barrier) expired after MORI_SHMEM_DEVICE_SPIN_TIMEOUT; "
            "the PE that should have signalled may be dead or stuck"
        )
    if code == _DEVICE_ERR_UNREACHABLE_PE:
        raise PeOutOfRangeError("a kernel addressed a PE that is out of range or not load/store reachable from this PE")
    if code == _DEVICE_ERR_INVALID_ARGUMENT:
        raise InvalidArgumentError("a kernel passed an unknown atomic, comparison or type code, or a bad immediate")
    if code == _DEVICE_ERR_BAD_ADDRESS:
        raise InvalidPointerError("a kernel passed a symmetric address outside the heap, or a misaligned word")
    if code != 0:
        raise RuntimeError(f"unknown device error code {code}")


class _ShmemKernels:
    """mori-shmem's own kernels (src/device/shmem_kernels.cu), loaded once per process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._module: Any = None
        self._state = b""
        self._stream: int | None = None

    def module(self) -> Any:
        """The loaded module, its global refreshed whenever the state changed (a re-init)."""
        with self._lock:
            if self._module is None:
                from mori.shmem.jit.registry import library_kernels

                self._module = library_kernels().load()
            state = bytes(shmem_device_state())
            if state != self._state:
                self._module.write_global(DEVICE_STATE_SYMBOL, state)
                self._state = state
            return self._module

    def stream(self) -> int:
        """A non-blocking stream of mori's own: the legacy default stream would wait for user
        kernels, and one spinning on a flag this very call sets would deadlock."""
        with self._lock:
            if self._stream is None:
                from mori.shmem.jit import driver

                self._stream = driver.create_stream(non_blocking=True)
            return self._stream


_kernels = _ShmemKernels()
# Host-launched atomics share one scratch word for the old value.
_atomic_lock = threading.Lock()


def shmem_barrier_on_stream(stream: Any = None) -> None:
    """Enqueues a device-side barrier of all PEs on ``stream`` (None: the default stream).

    Every PE must enqueue it; the kernel completes this PE's device puts, then waits for all PEs.
    """
    _kernels.module().function("mori_shmem_barrier_all_block").launch(1, 1, [], stream=stream)


def device_atomic(dest: int, amo: int, type_code: int, value_bits: int, compare_bits: int, pe: int) -> int:
    """One atomic on PE ``pe``'s copy of GPU heap word ``dest``, run by a kernel; returns the old bits."""
    if pe < 0 or pe >= api.shmem_npes():
        raise PeOutOfRangeError(f"pe={pe} is outside [0, npes={api.shmem_npes()})")
    info = api.shmem_heap_info()
    width = 4 if type_code in (0, 1) else 8
    if not info.base + info.reserved <= dest <= info.base + info.size - width:
        raise InvalidPointerError(f"dest={dest:#x} is not inside this PE's symmetric heap")
    if dest % width:
        raise InvalidArgumentError(f"dest={dest:#x} is not aligned to its {width}-byte type")
    with _atomic_lock:
        return _run_device_atomic(dest, amo, type_code, value_bits, compare_bits, pe)


def _run_device_atomic(dest: int, amo: int, type_code: int, value_bits: int, compare_bits: int, pe: int) -> int:
    state = shmem_device_state()
    scratch = state.heap_base + _SYNC_SCRATCH_OFFSET
    kernel = _kernels.module().function("mori_shmem_host_atomic")
    stream = _kernels.stream()
    kernel.launch(
        1, 1,
        [state, ctypes.c_uint64(dest), ctypes.c_int32(amo), ctypes.c_int32(type_code), ctypes.c_uint64(value_bits),
         ctypes.c_uint64(compare_bits), ctypes.c_int32(pe), ctypes.c_uint64(scratch)],
        stream=stream,
    )  # fmt: skip
    from mori.shmem.jit import driver

    driver.stream_synchronize(stream)
    shmem_check_device_error()
    # Read back through the library's own stream: a legacy-stream copy would wait for this
    # process's other kernels, and one of them may be spinning on a peer that waits for us.
    old = ctypes.c_uint64()
    api.shmem_getmem(ctypes.addressof(old), scratch, 8, state.my_pe)
    return int(old.value)


__all__ = [
    "DEVICE_STATE_SYMBOL",
    "DeviceState",
    "device_atomic",
    "shmem_barrier_on_stream",
    "shmem_check_device_error",
    "shmem_cuda_available",
    "shmem_cuda_device",
    "shmem_device_state",
    "shmem_module_init",
]
