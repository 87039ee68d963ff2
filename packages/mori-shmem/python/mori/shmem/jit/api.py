# SPDX-License-Identifier: MIT
"""``compile`` and ``load_module``: from a kernel source to a cached cubin, or to a loaded module."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from mori.shmem.errors import InvalidArgumentError
from mori.shmem.jit import driver
from mori.shmem.jit.cache import Request, build
from mori.shmem.jit.compiler import extra_flags, find_compiler
from mori.shmem.jit.errors import CudaDriverError, CudaUnavailableError
from mori.shmem.jit.module import Module, loaded_module, remember
from mori.shmem.jit.source import DefineValue, SourceLike, render
from mori.shmem.settings import setting

_log = logging.getLogger("mori.shmem.jit")

# The target when nothing says otherwise and no GPU is visible: Hopper, mori's first target.
DEFAULT_ARCH = "sm_90"
# sm_90, sm_90a (arch-specific features), sm_100f (family), sm_120 ...
_ARCH = re.compile(r"sm_\d{2,3}[af]?")


def check_arch(arch: str, *, where: str = "arch") -> str:
    if not isinstance(arch, str) or not _ARCH.fullmatch(arch.strip()):
        raise InvalidArgumentError(f"{where}={arch!r} is not a real GPU target: expected sm_XX, e.g. sm_90 or sm_90a")
    return arch.strip()


def resolve_arch(arch: str | None = None, *, device: int | None = None) -> tuple[str, str]:
    """(target, where it came from): ``arch``, else MORI_JIT_ARCH, else the GPU's, else sm_90.

    ``device`` names the GPU; None means the device of the current context, or the default
    device. Asking the GPU creates no context, and having no GPU is not an error here.
    """
    if arch is not None:
        return check_arch(arch), "argument"
    configured = setting("MORI_JIT_ARCH")
    if configured:
        return check_arch(configured, where="MORI_JIT_ARCH"), "MORI_JIT_ARCH"
    try:
        if device is None:
            current = driver.current_context()
            device = current.device if current is not None else driver._default_device()
        return driver.device_arch(device), f"GPU {device}"
    except CudaUnavailableError:
        return DEFAULT_ARCH, "default (no GPU visible)"


def _request(
    source: SourceLike,
    *,
    name: str | None,
    defines: Mapping[str, DefineValue] | None,
    include_dirs: Iterable[SourceLike],
    options: Iterable[str],
    arch: str,
    compiler: str | None,
) -> Request:
    if isinstance(options, str):
        raise InvalidArgumentError(f"options={options!r} must be a sequence of strings, not one string")
    chosen = find_compiler(compiler)
    rendered = render(source, name=name, defines=defines, include_dirs=include_dirs)
    all_options = (*chosen.default_options(), *options, *_proxy_flags(), *extra_flags())
    return Request(rendered, chosen, tuple(all_options), arch)


def _proxy_flags() -> tuple[str, ...]:
    """``-DMORI_SHMEM_DISABLE_DEVICE_PROXY`` when this process runs a job in which every PE is load/store
    reachable. The device proxy's branch is never taken there, yet its code in a kernel costs an
    8-byte put-with-signal ping-pong 0.3 us of its 1.5 (measured on H200), so such kernels are built
    without it. Kernels compiled before init, or in a job with remote PEs, keep it; the flag is part
    of the cache key, so the two builds never mix."""
    from mori.shmem import api

    if not api.shmem_is_initialized():
        return ()
    if any(api.shmem_pe_transport(pe) == "remote" for pe in range(api.shmem_npes())):
        return ()
    return ("-DMORI_SHMEM_DISABLE_DEVICE_PROXY",)


def compile(
    source: SourceLike,
    *,
    name: str | None = None,
    defines: Mapping[str, DefineValue] | None = None,
    include_dirs: Iterable[SourceLike] = (),
    options: Iterable[str] = (),
    arch: str | None = None,
    compiler: str | None = None,
) -> Path:
    """The cached cubin of ``source`` specialised by ``defines``, compiling it if needed.

    ``source`` is a ``.cu`` file (a Path, or a str ending in ``.cu``) or CUDA C++ text.
    ``defines`` become ``#define NAME VALUE`` lines at the top. ``include_dirs`` are searched
    for headers, whose contents (not paths) enter the cache key. ``options`` are compiler
    options, after ``-std=c++17 -lineinfo`` (and ``-O3`` for nvcc). ``arch`` defaults to
    MORI_JIT_ARCH, then the current GPU's, then sm_90: no GPU is needed. ``compiler`` overrides
    MORI_JIT_COMPILER (auto, nvrtc or nvcc).
    """
    target, _origin = resolve_arch(arch)
    request = _request(
        source,
        name=name,
        defines=defines,
        include_dirs=include_dirs,
        options=options,
        arch=target,
        compiler=compiler,
    )
    return build(request).path


def _load_hint(error_code: int, request: Request) -> str:
    if error_code == driver.CUDA_ERROR_NO_BINARY_FOR_GPU:
        return f"the cubin was built for {request.arch}; set arch= or MORI_JIT_ARCH to this GPU's target"
    if error_code in (driver.CUDA_ERROR_INVALID_IMAGE, 222):  # 222: CUDA_ERROR_UNSUPPORTED_PTX_VERSION
        major, minor = driver.driver_version()
        return (
            f"built by {request.compiler.describe()}; the driver supports CUDA {major}.{minor}: "
            "a compiler newer than the driver produces code it cannot load"
        )
    return ""


def load_module(
    source: SourceLike,
    *,
    name: str | None = None,
    defines: Mapping[str, DefineValue] | None = None,
    include_dirs: Iterable[SourceLike] = (),
    options: Iterable[str] = (),
    arch: str | None = None,
    compiler: str | None = None,
    device: int | None = None,
) -> Module:
    """``compile`` then load the cubin into the current CUDA context (see ``ensure_context``).

    Loading the same kernel again in the same context returns the same ``Module``. Raises
    ``CudaUnavailableError`` without a GPU (before compiling anything).
    """
    context = driver.ensure_context(device)
    target, _origin = resolve_arch(arch, device=context.device)
    request = _request(
        source,
        name=name,
        defines=defines,
        include_dirs=include_dirs,
        options=options,
        arch=target,
        compiler=compiler,
    )
    key = request.key()
    existing = loaded_module(context, key)
    if existing is not None:
        return existing
    result = build(request, key=key)
    try:
        handle = driver.module_load(result.path.read_bytes())
    except CudaDriverError as exc:
        if exc.code != driver.CUDA_ERROR_INVALID_IMAGE:
            raise CudaDriverError(
                exc.function, exc.code, exc.name, exc.description, _load_hint(exc.code, request)
            ) from None
        # An ELF file the driver rejects may be a damaged cache entry: rebuild it once.
        _log.warning("the driver rejected %s (%s); rebuilding it", result.path, exc.name)
        result = build(request, key=key, force=True)
        handle = driver.module_load(result.path.read_bytes(), hint=_load_hint(exc.code, request))
    module = Module(handle, context, name=request.source.name, arch=target, key=key, path=result.path)
    kept = remember(module)
    if kept is not module:  # another thread loaded it meanwhile
        module.unload()
    _log.debug("loaded %s from %s", kept, result.path)
    return kept


def load_image(image: bytes, *, name: str = "image", device: int | None = None) -> Module:
    """Loads a module you built yourself (a cubin, a fatbin, or PTX text, which the driver
    compiles for the GPU) into the current CUDA context, e.g. LLVM IR linked with mori-ir's bitcode.

    Not cached: every call loads a new ``Module``. Raises ``CudaUnavailableError`` without a GPU.
    """
    if not isinstance(image, (bytes, bytearray)) or not image:
        raise InvalidArgumentError(f"load_image: image must be non-empty bytes, got {type(image).__name__}")
    context = driver.ensure_context(device)
    data = bytes(image)
    if data.lstrip()[:1] in (b".", b"/") and not data.endswith(b"\0"):
        data += b"\0"  # PTX is read as a C string
    handle = driver.module_load(data)
    key = hashlib.sha256(data).hexdigest()
    return Module(handle, context, name=name, arch=driver.device_arch(context.device), key=key, path=Path(name))
