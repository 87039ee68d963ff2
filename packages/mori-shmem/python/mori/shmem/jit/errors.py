# SPDX-License-Identifier: MIT
"""Exceptions of mori.shmem.jit.

All derive from ``JitError`` and so from ``MoriShmemError``; each also derives from the closest
builtin so callers that do not know mori can still catch them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mori.shmem.errors import InvalidArgumentError, MoriShmemError


class JitError(MoriShmemError):
    """Base class of every failure of the JIT (compiling, caching, loading, launching)."""


class JitCompileError(JitError, RuntimeError):
    """The device compiler rejected a kernel; ``log`` holds its complete output."""

    def __init__(
        self,
        message: str,
        *,
        log: str,
        compiler: str,
        options: Sequence[str] = (),
        source_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.log = log
        self.compiler = compiler
        self.options = tuple(options)
        self.source_path = source_path


class JitCompilerNotFoundError(JitError, RuntimeError):
    """Neither NVRTC nor nvcc could be found (the message lists where they were looked for)."""


class JitSymbolNotFoundError(JitError, InvalidArgumentError):
    """A loaded module has no kernel or global of the requested name (``symbol`` holds it)."""

    def __init__(self, message: str, *, symbol: str) -> None:
        super().__init__(message)
        self.symbol = symbol


class CudaUnavailableError(JitError, RuntimeError):
    """Something needs the GPU, but there is no NVIDIA driver or no visible CUDA device."""


class CudaDriverError(JitError, RuntimeError):
    """A CUDA driver API call returned an error."""

    def __init__(self, function: str, code: int, name: str, description: str, hint: str = "") -> None:
        message = f"{function} failed: {name} ({code}): {description}"
        if hint:
            message += f"; {hint}"
        super().__init__(message)
        self.function = function
        self.code = code
        self.name = name
        self.description = description


__all__ = [
    "CudaDriverError",
    "CudaUnavailableError",
    "JitCompileError",
    "JitCompilerNotFoundError",
    "JitError",
    "JitSymbolNotFoundError",
]
