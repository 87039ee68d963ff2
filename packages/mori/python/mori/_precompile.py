# SPDX-License-Identifier: MIT
"""MORI_PRECOMPILE=1: fill the JIT cache with every declared kernel when mori is imported."""

from __future__ import annotations

import logging

_log = logging.getLogger("mori.jit")


def precompile_declared_kernels() -> None:
    try:
        from mori.shmem.jit.registry import discover, precompile
    except ModuleNotFoundError as exc:
        raise ImportError(
            "MORI_PRECOMPILE is set, but the JIT lives in the mori-shmem wheel, which is not installed: "
            "pip install mori-shmem, or unset MORI_PRECOMPILE"
        ) from exc
    kernels, problems = discover()
    for problem in problems:
        _log.warning("MORI_PRECOMPILE: %s", problem)
    results = precompile(kernels)
    _log.info("MORI_PRECOMPILE: %d kernels in the JIT cache", len(results))
