# SPDX-License-Identifier: MIT
"""MORI's ``mori.cpp`` functions of its XLA FFI target: ``mori_ep_handler``, ``mori_ep_type_info``
and ``preload_kernels``, and the registration of the target ``mori_ep`` with jax.

One target name, ``mori_ep``, for two platforms: on ``cpu`` it runs the cpu backend of mori-ep,
on ``CUDA`` the EP kernels on XLA's stream. Each call site looks its op up once per executable
(the instantiate stage, by the call's ``ep_config`` attribute) and keeps it as XLA FFI state of
the registered type ``mori_ep``.
"""

from __future__ import annotations

import logging
from typing import Any

from mori.jax import ffi_build

logger = logging.getLogger("mori.jax")

TARGET = "mori_ep"
#: jax's platform names of the two handlers (register_ffi_target's ``platform``).
PLATFORMS = {"cpu": "mori_jax_execute_cpu", "CUDA": "mori_jax_execute_cuda"}


def _capsule(address: int) -> Any:
    import jax.ffi

    return jax.ffi.pycapsule(address)


def mori_ep_handler(platform: str = "CUDA") -> dict[str, Any]:
    """The handler bundle of ``mori_ep`` on ``platform`` ("cpu" or "CUDA", MORI's default being its
    GPU): PyCapsules of its ``instantiate`` and ``execute`` stages, for ``jax.ffi.register_ffi_target``."""
    lib = ffi_build.library()
    execute = PLATFORMS.get(platform)
    if execute is None:
        from mori.ep.errors import EpConfigError

        raise EpConfigError(f"platform={platform!r} is not one of {sorted(PLATFORMS)}")
    return {
        "instantiate": _capsule(lib.mori_jax_instantiate()),
        "execute": _capsule(getattr(lib, execute)()),
    }


def mori_ep_type_info() -> dict[str, Any]:
    """The FFI state type of ``mori_ep`` (its ``type_id`` and ``type_info``), for ``jax.ffi.register_ffi_type``."""
    lib = ffi_build.library()
    return {"type_id": _capsule(lib.mori_jax_type_id()), "type_info": _capsule(lib.mori_jax_type_info())}


def preload_kernels() -> None:
    """Builds (or loads from the cache) the FFI handler and registers the target now rather than
    when the first op is created. The EP kernels of an op load when the op is created (cuda
    backend), as in mori.ep."""
    register_targets()


_registered = False


def register_targets() -> None:
    """Registers the type and the target ``mori_ep`` with jax, for the cpu and CUDA platforms (once).

    jax's backends start first: a platform's client, when it starts, takes the targets registered
    before it ahead of the types, and rejects a target whose state type it does not know yet. So
    registration waits for an op (or ``preload_kernels()``), which also leaves
    ``jax.distributed.initialize()`` free to run after ``import mori.jax``."""
    global _registered
    if _registered:
        return
    import jax
    import jax.ffi

    jax.devices()  # starts the backends, so the registrations below apply at once, in order

    for platform in PLATFORMS:
        jax.ffi.register_ffi_type(TARGET, mori_ep_type_info(), platform=platform)
        jax.ffi.register_ffi_target(TARGET, mori_ep_handler(platform), platform=platform)
    _registered = True
    logger.debug("registered the XLA FFI target %s for %s", TARGET, ", ".join(PLATFORMS))
