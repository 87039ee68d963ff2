# SPDX-License-Identifier: MIT
"""mori.shmem.jit: CUDA C++ kernels compiled at run time, cached on disk, launched through the driver.

Every mori GPU package builds its device code with this: a ``.cu`` source specialised by
``#define``s is compiled to a cubin by NVRTC (the ``nvidia-cuda-nvrtc`` wheel) or nvcc, cached
under ``~/.cache/mori/jit`` by content hash, loaded with ``cuModuleLoadData`` into the current
(primary) context and launched with ``cuLaunchKernel``. No CUDA compiler is needed to install a
wheel, and importing this module needs no GPU::

    module = jit.load_module(src, defines={"HIDDEN": 7168}, include_dirs=[jit.include_dir()])
    module.function("my_kernel").launch(grid, block, [out_tensor, ctypes.c_int32(n)], stream=s)

See docs/user-guide/jit.md.
"""

from __future__ import annotations

from mori.shmem.jit.api import compile, load_image, load_module, resolve_arch
from mori.shmem.jit.cache import cache_root, clear
from mori.shmem.jit.driver import Context, ensure_context, is_available
from mori.shmem.jit.errors import (
    CudaDriverError,
    CudaUnavailableError,
    JitCompileError,
    JitCompilerNotFoundError,
    JitError,
    JitSymbolNotFoundError,
)
from mori.shmem.jit.module import Function, Module
from mori.shmem.jit.registry import KernelSpec, compile_specs
from mori.shmem.jit.source import include_dir, source_dir

__all__ = [
    "Context",
    "CudaDriverError",
    "CudaUnavailableError",
    "Function",
    "JitCompileError",
    "JitCompilerNotFoundError",
    "JitError",
    "JitSymbolNotFoundError",
    "KernelSpec",
    "Module",
    "cache_root",
    "clear",
    "compile",
    "compile_specs",
    "ensure_context",
    "include_dir",
    "is_available",
    "load_image",
    "load_module",
    "resolve_arch",
    "source_dir",
]
