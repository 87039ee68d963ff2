# SPDX-License-Identifier: MIT
"""Loaded modules (one cubin in one CUDA context) and their kernels."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mori.shmem.errors import InvalidArgumentError
from mori.shmem.jit import driver
from mori.shmem.jit.errors import JitError, JitSymbolNotFoundError
from mori.shmem.jit.launch import DEFAULT_SHARED_MEMORY_LIMIT, Dim3, prepare_launch

_log = logging.getLogger("mori.shmem.jit")

_Found = TypeVar("_Found")


class Function:
    """One ``extern "C" __global__`` kernel of a loaded ``Module``."""

    def __init__(self, module: Module, name: str, handle: int) -> None:
        self.module = module
        self.name = name
        self.handle = handle
        self._shared_mem_allowed = DEFAULT_SHARED_MEMORY_LIMIT
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<mori.shmem.jit.Function {self.name} of {self.module.name} ({self.module.arch})>"

    def _allow_shared_mem(self, size: int) -> None:
        limit = driver.max_dynamic_shared_memory(self.module.context.device)
        if size > limit:
            raise InvalidArgumentError(
                f"shared_mem={size} exceeds the {limit} bytes of dynamic shared memory a block may use "
                f"on device {self.module.context.device}"
            )
        with self._lock:
            if size > self._shared_mem_allowed:
                driver.function_set_max_dynamic_shared(self.handle, size)
                self._shared_mem_allowed = size

    def launch(
        self,
        grid: Dim3,
        block: Dim3,
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
        stream: Any = None,
    ) -> None:
        """Launches the kernel asynchronously on ``stream``.

        ``grid`` and ``block`` are an int or a tuple of up to 3 ints. ``stream`` is None (the
        legacy default stream), an int CUstream, or an object with ``.cuda_stream`` such as
        ``torch.cuda.Stream``. Each element of ``args`` is one kernel parameter:

        - ctypes scalars (``c_int32``, ``c_float``, ``c_uint64``, ...) and ``ctypes.Structure``
          instances are passed by value, as they are;
        - numpy scalars are passed by value with their own width (``np.float32(1)`` is a float);
        - Python ints are passed as 64-bit integers: right for pointers and 64-bit parameters;
          use ``ctypes.c_int32`` for ``int`` parameters to say what you mean;
        - Python floats are refused (float or double? use ``c_float`` / ``c_double``);
        - objects with ``data_ptr()`` (torch tensors) or ``__cuda_array_interface__`` are passed
          as their device pointer.

        Bad grid, block, shared memory, stream or arguments raise ``InvalidArgumentError``
        before anything is launched.
        """
        config = prepare_launch(grid, block, args, shared_mem=shared_mem, stream=stream)
        self.module.check_loaded()
        if config.shared_mem > self._shared_mem_allowed:
            self._allow_shared_mem(config.shared_mem)
        driver.make_current(self.module.context)
        driver.launch_kernel(self.handle, config.grid, config.block, config.shared_mem, config.stream, config.params)


class Module:
    """A cubin loaded into one CUDA context; get kernels with ``function`` and globals with
    ``global_address`` / ``write_global`` / ``read_global``."""

    def __init__(self, handle: int, context: driver.Context, *, name: str, arch: str, key: str, path: Path) -> None:
        self.handle = handle
        self.context = context
        self.name = name
        self.arch = arch
        self.key = key
        self.path = path
        self._functions: dict[str, Function] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "" if self.handle else " (unloaded)"
        return (
            f"<mori.shmem.jit.Module {self.name} {self.arch} key={self.key[:16]} device={self.context.device}{state}>"
        )

    def check_loaded(self) -> None:
        if not self.handle:
            raise JitError(f"module {self.name} was unloaded")

    def function(self, name: str) -> Function:
        """The kernel ``name``; it must be declared ``extern "C"`` (C++ names are mangled).

        Raises ``JitSymbolNotFoundError`` (an ``InvalidArgumentError``) when there is none."""
        self.check_loaded()
        with self._lock:
            found = self._functions.get(name)
            if found is not None:
                return found
            handle = self._find(
                driver.module_function,
                name,
                "kernel",
                'kernels must be declared extern "C" __global__ to be found by name',
            )
            found = Function(self, name, handle)
            self._functions[name] = found
            return found

    def global_address(self, name: str) -> tuple[int, int]:
        """(device address, size in bytes) of the ``__device__`` / ``__constant__`` variable ``name``.

        Raises ``JitSymbolNotFoundError`` (an ``InvalidArgumentError``) when there is none."""
        self.check_loaded()
        return self._find(
            driver.module_global,
            name,
            "global",
            "declare it at namespace scope as __device__ or __constant__ (and make sure the code uses it, or it "
            "may be optimised away)",
        )

    def _find(self, lookup: Callable[[int, str], _Found | None], name: str, kind: str, how_to_declare: str) -> _Found:
        """``lookup(handle, name)`` in this module's context; None from it raises JitSymbolNotFoundError
        naming the module, the ``kind`` of symbol and how such a symbol must be declared."""
        driver.make_current(self.context)
        found = lookup(self.handle, name)
        if found is None:
            raise JitSymbolNotFoundError(
                f"module {self.name} ({self.path}) has no {kind} {name!r}; {how_to_declare}", symbol=name
            )
        return found

    def write_global(self, name: str, data: bytes | bytearray | memoryview | Any) -> None:
        """Copies ``data`` (any bytes-like object, e.g. a ``ctypes.Structure``) into global ``name``.

        ``data`` must be exactly the global's size: a mismatch almost always means the host and
        device disagree on a struct's layout. Synchronous, like ``cuMemcpyHtoD``.
        """
        address, size = self.global_address(name)
        view = memoryview(data).cast("B")
        if view.nbytes != size:
            raise InvalidArgumentError(
                f"write_global({name!r}): {view.nbytes} bytes given, but the global is {size} bytes "
                f"in module {self.name}"
            )
        driver.memcpy_htod(address, view)

    def read_global(self, name: str) -> bytes:
        """The current bytes of global ``name`` (synchronous)."""
        address, size = self.global_address(name)
        return driver.memcpy_dtoh(address, size)

    def unload(self) -> None:
        """Unloads the module; it (and its functions) can no longer be used."""
        with self._lock:
            if not self.handle:
                return
            driver.make_current(self.context)
            driver.module_unload(self.handle)
            self.handle = 0
            self._functions.clear()
        with _loaded_lock:
            if _loaded.get((self.context.handle, self.key)) is self:
                del _loaded[(self.context.handle, self.key)]
        _log.debug("unloaded %s", self)


# Modules loaded by this process, keyed by (context, cache key): loading the same kernel twice
# returns the same Module, so ops that share a kernel share its globals and its load cost.
_loaded: dict[tuple[int, str], Module] = {}
_loaded_lock = threading.RLock()


def loaded_module(context: driver.Context, key: str) -> Module | None:
    with _loaded_lock:
        return _loaded.get((context.handle, key))


def remember(module: Module) -> Module:
    """Stores ``module`` unless another thread got there first; returns the one kept."""
    with _loaded_lock:
        return _loaded.setdefault((module.context.handle, module.key), module)
