# SPDX-License-Identifier: MIT
"""Builds mori.jax's XLA FFI handler (``ffi_src/ep_ffi.cpp``) at first use and loads it.

Why at first use, with the machine's C++ compiler, against ``jax.ffi.include_dir()``:

- jax is an optional extra of mori-ep, so the wheel cannot be built against XLA's FFI headers
  (building it only when they happen to be present would ship two different wheels under one
  name), and vendoring the headers would pin one XLA FFI version while users upgrade jax freely.
- Compiled against the headers of the jaxlib that then loads it, the handler always speaks that
  jaxlib's FFI version; the compile takes about two seconds and is cached on disk, keyed by the
  source, the headers and the compiler (``MORI_JIT_CACHE_DIR``/jax, like the kernels' cache).
- The handler reaches the EP protocol through plain C: the cpu backend's ``mori_ep_cpu_run`` in
  mori.ep._C (found with dlsym) and, on the GPU, the same JIT-compiled kernels as the torch path
  (CUfunction handles from mori.shmem.jit), so it needs no pybind11, no torch and no CUDA headers.

The price is a host C++ compiler (``$CXX``, else ``c++``/``g++``) the first time mori.jax is used
on a machine; ``mori.jax.preload_kernels()`` (or importing mori.jax) builds it ahead of a job.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import mori
from mori.ep.errors import EpConfigError

logger = logging.getLogger("mori.jax")

SOURCE = Path(__file__).resolve().parent / "ffi_src" / "ep_ffi.cpp"
#: ep_args.h, shared with the kernels and the cpu backend (installed with mori.ep's device sources).
ARGS_HEADER_DIR = Path(__file__).resolve().parent.parent / "ep" / "device_src"
#: The root package's CUDA driver loader, which the handler uses on the CUDA platform.
DRIVER_HEADER = Path(mori.get_include()) / "mori" / "cuda_driver.hpp"
_FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-return-type")


def compiler() -> str:
    """The host C++ compiler: $CXX, else the first of c++, g++, clang++ on PATH."""
    configured = os.environ.get("CXX")
    candidates = [configured] if configured else ["c++", "g++", "clang++"]
    for name in candidates:
        found = shutil.which(name)
        if found:
            return found
    raise EpConfigError(
        f"mori.jax compiles its XLA FFI handler at first use and found no C++ compiler (looked for "
        f"{', '.join(candidates)}); install one (apt-get install g++) or set CXX"
    )


def _headers_digest(include_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted((include_dir / "xla" / "ffi" / "api").glob("*.h")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    digest.update((ARGS_HEADER_DIR / "ep_args.h").read_bytes())
    digest.update(DRIVER_HEADER.read_bytes())
    return digest.hexdigest()


def _cache_dir() -> Path:
    from mori.shmem.jit.cache import cache_root

    return cache_root() / "jax"


def build() -> Path:
    """The handler library for the installed jaxlib, compiled now if the cache lacks it."""
    import jax.ffi

    include_dir = Path(jax.ffi.include_dir())
    cxx = compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
    key = hashlib.sha256(
        "\0".join([SOURCE.read_text(), _headers_digest(include_dir), cxx, version, " ".join(_FLAGS)]).encode()
    ).hexdigest()[:32]
    target = _cache_dir() / f"mori_ep_ffi_{key}.so"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    command = [cxx, *_FLAGS, f"-I{include_dir}", f"-I{ARGS_HEADER_DIR}", f"-I{mori.get_include()}", str(SOURCE), "-ldl"]
    # Compile to a private file, then rename: concurrent PEs building the same key never load a half-written one.
    fd, partial = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
    os.close(fd)
    logger.info("compiling mori.jax's XLA FFI handler: %s", " ".join(command))
    done = subprocess.run([*command, "-o", partial], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        os.unlink(partial)
        raise EpConfigError(
            f"compiling mori.jax's XLA FFI handler failed ({' '.join(command)}):\n{done.stderr[-4000:]}"
        )
    os.replace(partial, target)
    return target


@cache
def library() -> ctypes.CDLL:
    """The loaded handler library (built if need be), with its C entry points typed."""
    lib = ctypes.CDLL(str(build()))
    for name in ("mori_jax_instantiate", "mori_jax_execute_cpu", "mori_jax_execute_cuda"):
        getattr(lib, name).restype = ctypes.c_void_p
        getattr(lib, name).argtypes = []
    for name in ("mori_jax_type_id", "mori_jax_type_info"):
        getattr(lib, name).restype = ctypes.c_void_p
    lib.mori_jax_args_size.restype = ctypes.c_int
    lib.mori_jax_spec_size.restype = ctypes.c_int
    lib.mori_jax_register_op.restype = ctypes.c_int
    lib.mori_jax_register_op.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    lib.mori_jax_unregister_op.restype = None
    lib.mori_jax_unregister_op.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    return lib
