# SPDX-License-Identifier: MIT
"""Kernel variants that packages declare, so ``mori-jit precompile`` can build them ahead of time.

A package lists its variants through the entry point group ``mori.jit_kernels``; each entry is a
callable returning a list of ``KernelSpec``::

    [project.entry-points."mori.jit_kernels"]
    mori-ep = "mori.ep.kernels:jit_kernels"

Precompiling fills the same cache that ``load_module`` reads, with the same keys.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from mori.shmem.errors import MoriShmemError
from mori.shmem.jit.api import compile as compile_kernel
from mori.shmem.jit.api import load_module, resolve_arch
from mori.shmem.jit.cache import Request, build
from mori.shmem.jit.compiler import Compiler, extra_flags, find_compiler
from mori.shmem.jit.module import Module
from mori.shmem.jit.source import DefineValue, include_dir, render, source_dir

_log = logging.getLogger("mori.shmem.jit")

ENTRY_POINT_GROUP = "mori.jit_kernels"


@dataclass(frozen=True)
class KernelSpec:
    """One kernel variant: what ``load_module`` is called with, minus the arch."""

    name: str
    source: Path
    defines: Mapping[str, DefineValue] = field(default_factory=dict)
    include_dirs: Sequence[Path] = ()
    options: Sequence[str] = ()

    def compile(self, *, arch: str | None = None, compiler: str | None = None) -> Path:
        """``jit.compile`` of this variant: the same cache entry ``precompile`` fills."""
        return compile_kernel(self.source, arch=arch, compiler=compiler, **self._build_options())

    def load(self, *, arch: str | None = None, compiler: str | None = None, device: int | None = None) -> Module:
        """``jit.load_module`` of this variant. Loading through the spec keeps the name, and so
        the cache file, the same as ``mori-jit precompile``'s."""
        return load_module(self.source, arch=arch, compiler=compiler, device=device, **self._build_options())

    def _build_options(self) -> dict[str, Any]:
        return {"name": self.name, "defines": self.defines, "include_dirs": self.include_dirs, "options": self.options}


@dataclass(frozen=True)
class DiscoveredKernel:
    entry_point: str  # the entry point that declared it (usually the distribution's name)
    spec: KernelSpec


def discover(group: str = ENTRY_POINT_GROUP) -> tuple[list[DiscoveredKernel], list[str]]:
    """Every declared kernel, and one message per entry point that failed to load or answer."""
    kernels: list[DiscoveredKernel] = []
    problems: list[str] = []
    for entry in sorted(entry_points(group=group), key=lambda item: item.name):
        try:
            provider: Callable[[], Iterable[KernelSpec]] = entry.load()
            specs = list(provider())
        except Exception as exc:  # a broken package must not hide the others' kernels
            problems.append(f"entry point {entry.name} ({entry.value}): {type(exc).__name__}: {exc}")
            continue
        for spec in specs:
            if not isinstance(spec, KernelSpec):
                problems.append(f"entry point {entry.name} returned {spec!r}, not a KernelSpec")
                continue
            kernels.append(DiscoveredKernel(entry.name, spec))
    return kernels, problems


@dataclass(frozen=True)
class PrecompileResult:
    entry_point: str
    name: str
    arch: str
    status: str  # "cached", "compiled" or "failed"
    seconds: float
    path: Path | None = None
    error: str = ""


def _precompile_one(kernel: DiscoveredKernel, arch: str, compiler: Compiler) -> PrecompileResult:
    spec = kernel.spec
    started = time.monotonic()
    try:
        rendered = render(spec.source, name=spec.name, defines=spec.defines, include_dirs=spec.include_dirs)
        options = (*compiler.default_options(), *spec.options, *extra_flags())
        result = build(Request(rendered, compiler, tuple(options), arch))
    except (MoriShmemError, OSError) as exc:
        return PrecompileResult(
            kernel.entry_point, spec.name, arch, "failed", time.monotonic() - started, error=str(exc)
        )
    status = "compiled" if result.compiled else "cached"
    return PrecompileResult(kernel.entry_point, spec.name, arch, status, time.monotonic() - started, result.path)


def precompile(
    kernels: Sequence[DiscoveredKernel],
    *,
    arch: str | None = None,
    compiler: str | None = None,
    jobs: int | None = None,
    only: str | None = None,
) -> list[PrecompileResult]:
    """Builds ``kernels`` (those whose name matches the glob ``only``) in ``jobs`` threads; a
    failure is reported in its result, not raised."""
    target, _origin = resolve_arch(arch)
    chosen = find_compiler(compiler)
    selected = [kernel for kernel in kernels if only is None or fnmatch.fnmatchcase(kernel.spec.name, only)]
    with _compile_pool(jobs) as pool:
        return list(pool.map(lambda kernel: _precompile_one(kernel, target, chosen), selected))


def compile_specs(
    specs: Sequence[KernelSpec], *, arch: str | None = None, compiler: str | None = None, jobs: int | None = None
) -> list[Path]:
    """Every spec's cubin (``KernelSpec.compile``), built at once in ``jobs`` threads like
    ``precompile``'s; the first failure raises its own typed error. A launcher's warm-up then
    takes about the time of its slowest kernels, not of all of them in turn."""
    with _compile_pool(jobs) as pool:
        return list(pool.map(lambda spec: spec.compile(arch=arch, compiler=compiler), specs))


def _compile_pool(jobs: int | None) -> ThreadPoolExecutor:
    """Threads suffice: the work happens in nvcc processes or inside NVRTC, outside the GIL, and
    the cache locks each kernel (two threads that want one compile it once)."""
    return ThreadPoolExecutor(max_workers=max(1, jobs or min(8, os.cpu_count() or 1)), thread_name_prefix="mori-jit")


def shmem_kernels() -> list[KernelSpec]:
    """mori-shmem's own kernels (entry point ``mori-shmem`` of ``mori.jit_kernels``): the library's
    (barrier on a stream, host-launched atomics). The benchmark registers its own
    (``mori-shmem-bench``, mori.shmem.bench.gpu.jit_kernels)."""
    return [library_kernels()]


def library_kernels() -> KernelSpec:
    """The library's own kernels; ``mori.shmem.device`` loads them through this spec."""
    return KernelSpec("shmem_kernels", source_dir() / "shmem_kernels.cu", include_dirs=(include_dir(),))
