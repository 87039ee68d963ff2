# SPDX-License-Identifier: MIT
"""The few CUDA driver API calls the JIT needs, through ctypes over ``libcuda.so.1``.

The driver is opened with dlopen at first use, never linked, so the wheel imports and compiles
kernels on machines without a GPU; only calls that need the GPU raise ``CudaUnavailableError``.
Every ``CUresult`` other than ``CUDA_SUCCESS`` becomes a ``CudaDriverError`` naming the call.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mori.shmem.errors import InvalidArgumentError
from mori.shmem.jit.errors import CudaDriverError, CudaUnavailableError

_log = logging.getLogger("mori.shmem.jit")

LIBRARY_NAME = "libcuda.so.1"

# CUresult values the JIT reacts to (cuda.h).
CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_NOT_FOUND = 500
CU_MODULE_LAZY_LOADING = 2  # CUmoduleLoadingMode

# CUdevice_attribute and CUfunction_attribute values (cuda.h).
_ATTR_COMPUTE_CAPABILITY_MAJOR = 75
_ATTR_COMPUTE_CAPABILITY_MINOR = 76
_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_STREAM_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_void_pp = ctypes.POINTER(ctypes.c_void_p)

# Argument types of every entry point used; all return CUresult (an int). The _v2 names are the
# symbols cuda.h maps the unsuffixed names to on 64-bit builds.
_PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "cuInit": (ctypes.c_uint,),
    "cuDriverGetVersion": (_c_int_p,),
    "cuDeviceGetCount": (_c_int_p,),
    "cuDeviceGet": (_c_int_p, ctypes.c_int),
    "cuDeviceGetAttribute": (_c_int_p, ctypes.c_int, ctypes.c_int),
    "cuDeviceGetName": (ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
    "cuCtxGetCurrent": (_c_void_pp,),
    "cuCtxSetCurrent": (ctypes.c_void_p,),
    "cuCtxGetDevice": (_c_int_p,),
    "cuCtxSynchronize": (),
    "cuDevicePrimaryCtxRetain": (_c_void_pp, ctypes.c_int),
    "cuModuleLoadData": (_c_void_pp, ctypes.c_char_p),
    "cuModuleUnload": (ctypes.c_void_p,),
    "cuModuleGetFunction": (_c_void_pp, ctypes.c_void_p, ctypes.c_char_p),
    "cuModuleGetGlobal_v2": (
        ctypes.POINTER(ctypes.c_uint64),
        ctypes.POINTER(ctypes.c_size_t),
        ctypes.c_void_p,
        ctypes.c_char_p,
    ),
    "cuMemcpyHtoD_v2": (ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t),
    "cuMemcpyDtoH_v2": (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t),
    "cuLaunchKernel": (
        ctypes.c_void_p,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_void_p,
        _c_void_pp,
        _c_void_pp,
    ),
    "cuFuncSetAttribute": (ctypes.c_void_p, ctypes.c_int, ctypes.c_int),
    "cuStreamCreate": (_c_void_pp, ctypes.c_uint),
    "cuStreamDestroy_v2": (ctypes.c_void_p,),
    "cuStreamSynchronize": (ctypes.c_void_p,),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuGetErrorString": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuModuleGetLoadingMode": (_c_int_p,),
}


class _Driver:
    """libcuda with its prototypes declared; ``cuInit`` has succeeded once this exists."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self._lib = library
        for name, argtypes in _PROTOTYPES.items():
            function = getattr(library, name)
            function.argtypes = argtypes
            function.restype = ctypes.c_int
        # The two calls of every launch, bound once.
        self.launch = library.cuLaunchKernel
        self.get_current = library.cuCtxGetCurrent

    def error_text(self, code: int) -> tuple[str, str]:
        name, text = ctypes.c_char_p(), ctypes.c_char_p()
        if self._lib.cuGetErrorName(code, ctypes.byref(name)) != 0 or name.value is None:
            return f"CUDA_ERROR_{code}", "unknown error"
        self._lib.cuGetErrorString(code, ctypes.byref(text))
        return name.value.decode(), (text.value or b"").decode()

    def call(self, function: str, *args: Any, hint: str = "") -> None:
        result = getattr(self._lib, function)(*args)
        if result != 0:
            name, text = self.error_text(result)
            raise CudaDriverError(function, result, name, text, hint)

    def status(self, function: str, *args: Any) -> int:
        """Calls ``function`` and returns its CUresult instead of raising (for expected errors)."""
        return int(getattr(self._lib, function)(*args))


_lock = threading.Lock()
_driver: _Driver | None = None
# Why the driver is unusable, once found out; later calls fail fast with the same reason.
_unavailable: str | None = None


def _load() -> _Driver:
    global _driver, _unavailable
    with _lock:
        if _driver is not None:
            return _driver
        if _unavailable is not None:
            raise CudaUnavailableError(_unavailable)
        try:
            library = ctypes.CDLL(LIBRARY_NAME)
        except OSError as exc:
            _unavailable = (
                f"no NVIDIA driver ({LIBRARY_NAME} not found: {exc}); the JIT can still compile kernels "
                "(mori-jit precompile), but loading and launching them needs a GPU"
            )
            raise CudaUnavailableError(_unavailable) from None
        driver = _Driver(library)
        result = driver.status("cuInit", 0)
        if result != 0:
            name, text = driver.error_text(result)
            if result == CUDA_ERROR_NO_DEVICE:
                _unavailable = f"no CUDA device visible (cuInit: {name}: {text}); check CUDA_VISIBLE_DEVICES"
            elif result == CUDA_ERROR_INSUFFICIENT_DRIVER:
                _unavailable = f"the NVIDIA driver is too old for this CUDA API (cuInit: {name}: {text})"
            else:
                raise CudaDriverError("cuInit", result, name, text)
            raise CudaUnavailableError(_unavailable)
        count = ctypes.c_int()
        driver.call("cuDeviceGetCount", ctypes.byref(count))
        if count.value == 0:
            _unavailable = "no CUDA device visible (cuDeviceGetCount returned 0); check CUDA_VISIBLE_DEVICES"
            raise CudaUnavailableError(_unavailable)
        _driver = driver
        return driver


def driver() -> _Driver:
    """The initialised driver; raises ``CudaUnavailableError`` when there is none or no device."""
    if _driver is not None:
        return _driver
    return _load()


def is_available() -> bool:
    """Whether a driver and at least one device are present (never raises for their absence)."""
    try:
        driver()
    except CudaUnavailableError:
        return False
    return True


def unavailable_reason() -> str | None:
    """Why ``is_available()`` is false, or None when the GPU is usable."""
    try:
        driver()
    except CudaUnavailableError as exc:
        return str(exc)
    return None


def driver_version() -> tuple[int, int]:
    """The CUDA version the driver supports, e.g. (13, 0)."""
    version = ctypes.c_int()
    driver().call("cuDriverGetVersion", ctypes.byref(version))
    return version.value // 1000, (version.value % 1000) // 10


def lazy_loading() -> bool:
    """Whether this process loads kernels lazily (CUDA_MODULE_LOADING=LAZY, CUDA's default since
    12.2); mori.shmem.proxy_hazards says why the device proxy cares."""
    mode = ctypes.c_int()
    driver().call("cuModuleGetLoadingMode", ctypes.byref(mode))
    return mode.value == CU_MODULE_LAZY_LOADING


def device_count() -> int:
    count = ctypes.c_int()
    driver().call("cuDeviceGetCount", ctypes.byref(count))
    return count.value


def _device_handle(device: int) -> int:
    count = device_count()
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
        raise InvalidArgumentError(f"device={device!r} is out of range: {count} CUDA device(s) are visible")
    handle = ctypes.c_int()
    driver().call("cuDeviceGet", ctypes.byref(handle), device)
    return handle.value


def _device_attribute(device: int, attribute: int) -> int:
    value = ctypes.c_int()
    driver().call("cuDeviceGetAttribute", ctypes.byref(value), attribute, _device_handle(device))
    return value.value


def device_arch(device: int) -> str:
    """The compute capability of ``device`` as an ``sm_XX`` target (``sm_90`` on Hopper)."""
    major = _device_attribute(device, _ATTR_COMPUTE_CAPABILITY_MAJOR)
    minor = _device_attribute(device, _ATTR_COMPUTE_CAPABILITY_MINOR)
    return f"sm_{major}{minor}"


def device_name(device: int) -> str:
    buffer = ctypes.create_string_buffer(256)
    driver().call("cuDeviceGetName", buffer, len(buffer), _device_handle(device))
    return buffer.value.decode(errors="replace")


def max_dynamic_shared_memory(device: int) -> int:
    """Bytes of dynamic shared memory one block may opt in to on ``device``."""
    return _device_attribute(device, _ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)


# ---------------------------------------------------------------------------------------------
# Contexts


@dataclass(frozen=True)
class Context:
    """A CUDA context (``handle`` is the CUcontext as an int) and the ordinal of its device."""

    handle: int
    device: int


_primary_contexts: dict[int, int] = {}


def _default_device() -> int:
    """The device ``ensure_context`` uses when no context is current and none is named: the PE's
    GPU once mori-shmem is initialized on the cuda backend (MORI_SHMEM_DEVICE or the one init
    chose), else device 0."""
    from mori.shmem._native import _C

    if _C.is_initialized() and _C.backend() == "cuda":
        return int(_C.cuda_device())
    return 0


def current_context() -> Context | None:
    """The context current on this thread, or None."""
    api = driver()
    handle = ctypes.c_void_p()
    api.call("cuCtxGetCurrent", ctypes.byref(handle))
    if not handle.value:
        return None
    device = ctypes.c_int()
    api.call("cuCtxGetDevice", ctypes.byref(device))
    return Context(handle.value, device.value)


def ensure_context(device: int | None = None) -> Context:
    """Makes sure a context is current on this thread and returns it.

    A context already current is used as is (when ``device`` is None or names its device).
    Otherwise the primary context of ``device`` (default: ``_default_device()``) is retained and
    made current. The primary context is the one PyTorch and the CUDA runtime use, so pointers
    from torch CUDA tensors are valid in kernels launched here.
    """
    current = current_context()
    if current is not None and (device is None or current.device == device):
        return current
    ordinal = _default_device() if device is None else device
    handle = _device_handle(ordinal)
    api = driver()
    with _lock:
        context = _primary_contexts.get(ordinal)
        if context is None:
            # Retained once per process and never released: modules loaded into it live as long
            # as the process, and releasing the last reference would destroy PyTorch's context.
            raw = ctypes.c_void_p()
            api.call("cuDevicePrimaryCtxRetain", ctypes.byref(raw), handle)
            context = int(raw.value or 0)
            _primary_contexts[ordinal] = context
    api.call("cuCtxSetCurrent", ctypes.c_void_p(context))
    _log.debug("made the primary context of device %d current", ordinal)
    return Context(context, ordinal)


def make_current(context: Context) -> None:
    """Makes ``context`` current on this thread if no context is (threads start with none)."""
    api = driver()
    handle = ctypes.c_void_p()
    result = api.get_current(ctypes.byref(handle))
    if result != 0:
        name, text = api.error_text(result)
        raise CudaDriverError("cuCtxGetCurrent", result, name, text)
    if not handle.value:
        api.call("cuCtxSetCurrent", ctypes.c_void_p(context.handle))


def context_synchronize() -> None:
    driver().call("cuCtxSynchronize")


def create_stream(*, non_blocking: bool = False, device: int | None = None) -> int:
    """A new CUstream in ``ensure_context(device)``'s context, as an int handle.

    ``non_blocking`` streams do not wait for the legacy default stream (CU_STREAM_NON_BLOCKING).
    The caller owns it; ``destroy_stream`` releases it.
    """
    ensure_context(device)
    handle = ctypes.c_void_p()
    driver().call("cuStreamCreate", ctypes.byref(handle), _STREAM_NON_BLOCKING if non_blocking else 0)
    return int(handle.value or 0)


def destroy_stream(stream: int) -> None:
    driver().call("cuStreamDestroy_v2", ctypes.c_void_p(stream))


def stream_synchronize(stream: int) -> None:
    driver().call("cuStreamSynchronize", ctypes.c_void_p(stream))


# ---------------------------------------------------------------------------------------------
# Modules, globals, launches


def module_load(image: bytes, *, hint: str = "") -> int:
    handle = ctypes.c_void_p()
    driver().call("cuModuleLoadData", ctypes.byref(handle), image, hint=hint)
    return int(handle.value or 0)


def module_unload(module: int) -> None:
    driver().call("cuModuleUnload", ctypes.c_void_p(module))


def module_function(module: int, name: str) -> int | None:
    """The CUfunction called ``name``, or None when the module has no such kernel."""
    api = driver()
    handle = ctypes.c_void_p()
    result = api.status("cuModuleGetFunction", ctypes.byref(handle), ctypes.c_void_p(module), name.encode())
    if result == CUDA_ERROR_NOT_FOUND:
        return None
    if result != 0:
        error_name, text = api.error_text(result)
        raise CudaDriverError("cuModuleGetFunction", result, error_name, text)
    return int(handle.value or 0)


def module_global(module: int, name: str) -> tuple[int, int] | None:
    """(device address, size in bytes) of the global ``name``, or None when there is none."""
    api = driver()
    address, size = ctypes.c_uint64(), ctypes.c_size_t()
    result = api.status(
        "cuModuleGetGlobal_v2", ctypes.byref(address), ctypes.byref(size), ctypes.c_void_p(module), name.encode()
    )
    if result == CUDA_ERROR_NOT_FOUND:
        return None
    if result != 0:
        error_name, text = api.error_text(result)
        raise CudaDriverError("cuModuleGetGlobal_v2", result, error_name, text)
    return address.value, size.value


def memcpy_htod(address: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    buffer = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
    driver().call("cuMemcpyHtoD_v2", ctypes.c_uint64(address), buffer, view.nbytes)


def memcpy_dtoh(address: int, size: int) -> bytes:
    buffer = ctypes.create_string_buffer(size)
    driver().call("cuMemcpyDtoH_v2", buffer, ctypes.c_uint64(address), size)
    return buffer.raw


def function_set_max_dynamic_shared(function: int, size: int) -> None:
    driver().call("cuFuncSetAttribute", ctypes.c_void_p(function), _FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, size)


def launch_kernel(
    function: int,
    grid: Sequence[int],
    block: Sequence[int],
    shared_mem: int,
    stream: int,
    params: ctypes.Array[ctypes.c_void_p],
) -> None:
    api = driver()
    # Called for every launch: the prototype converts the int handles, no wrapper objects.
    result = api.launch(
        function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem, stream, params, None
    )
    if result != 0:
        name, text = api.error_text(result)
        raise CudaDriverError("cuLaunchKernel", result, name, text)
