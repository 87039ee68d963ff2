# SPDX-License-Identifier: MIT
"""A vLLM general plugin that lets vLLM's MoRI all2all backend run on NVIDIA GPUs.

vLLM loads it in every process through the ``vllm.general_plugins`` entry point that the mori-ep
wheel declares (``mori_ep = "mori.ep.vllm_plugin:register"``). It changes one thing: vLLM's
``MoriAll2AllManager._make_all2all_kwargs`` (vllm/distributed/device_communicators/all2all.py,
read at vLLM commit 001430048e8175c8dff1bc57e1a81a1fa75460f9) starts with::

    from vllm.platforms.rocm import on_gfx942, on_gfx950
    assert on_gfx942() or on_gfx950(), "mori currently only support arch gfx942 and gfx950"

and, for more than one node, takes its launch geometry from the same two predicates (raising
NotImplementedError when both are false). On an NVIDIA GPU both are false, so the first MoE layer
fails before any mori-ep op is made. When vLLM's current platform is CUDA, the plugin runs that
one method with ``on_gfx942() -> True`` and ``on_gfx950() -> False`` as the names the method
imports, so the assertion passes and the multi-node branch uses the gfx942 geometry (16 warps per
block, 32 blocks, 16 RDMA blocks). Nothing else changes: ``vllm.platforms.rocm`` is neither
imported nor modified (every other caller of the predicates sees the real ones), and on any other
platform the method runs as vLLM wrote it.

Tested against a stand-in of vLLM's module with that function's shape, not against a vLLM
install (packages/mori-ep/tests/test_vllm_plugin.py).
"""

from __future__ import annotations

import builtins
import functools
import importlib
import logging
import types
from collections.abc import Callable
from typing import Any

# Under vLLM's logger, so the line shows in vLLM's log with vLLM's handler (the mori logger has
# none of its own).
LOGGER_NAME = "vllm.plugins.mori_ep"
logger = logging.getLogger(LOGGER_NAME)

#: Where the check lives, and the module whose predicates it imports.
ALL2ALL_MODULE = "vllm.distributed.device_communicators.all2all"
MANAGER_CLASS = "MoriAll2AllManager"
CHECKED_METHOD = "_make_all2all_kwargs"
ARCH_MODULE = "vllm.platforms.rocm"

#: What the checked method sees on NVIDIA in place of vllm.platforms.rocm's predicates.
NVIDIA_ARCH_PREDICATES = types.SimpleNamespace(on_gfx942=lambda: True, on_gfx950=lambda: False)

_RELAXED_MARK = "__mori_ep_relaxed_for_nvidia__"


def _on_nvidia() -> bool:
    # Through importlib: vLLM ships no type information, and mori-ep does not depend on it.
    platforms: Any = importlib.import_module("vllm.platforms")
    return bool(platforms.current_platform.is_cuda())


def _importing_nvidia_predicates(method: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of ``method`` whose ``from vllm.platforms.rocm import ...`` yields
    NVIDIA_ARCH_PREDICATES; every other import is the original's, and its globals are a copy of
    the module's taken now (all2all.py binds them at import and never rebinds them)."""
    real_import = builtins.__import__

    def scoped_import(
        name: str,
        globals: dict[str, Any] | None = None,
        locals: dict[str, Any] | None = None,
        fromlist: tuple[str, ...] | list[str] | None = (),
        level: int = 0,
    ) -> Any:
        if name == ARCH_MODULE and level == 0 and fromlist:
            return NVIDIA_ARCH_PREDICATES
        return real_import(name, globals, locals, fromlist or (), level)

    # The import statement looks __import__ up in the function's builtins, which come from its
    # globals: so only this copy sees the scoped import, and no process-wide state changes.
    scoped_builtins = dict(vars(builtins), __import__=scoped_import)
    scoped_globals = dict(method.__globals__, __builtins__=scoped_builtins)
    copy = types.FunctionType(method.__code__, scoped_globals, method.__name__, method.__defaults__, method.__closure__)
    copy.__kwdefaults__ = method.__kwdefaults__
    return copy


def relax_mori_arch_check() -> bool:
    """Wraps vLLM's MoriAll2AllManager._make_all2all_kwargs (see the module doc). Returns whether
    it is wrapped now; False, with a warning, when vLLM has no such method (another version)."""
    try:
        all2all = importlib.import_module(ALL2ALL_MODULE)
    except ImportError as exc:
        logger.warning("mori-ep's vLLM plugin: cannot import %s (%s); nothing changed", ALL2ALL_MODULE, exc)
        return False
    manager = getattr(all2all, MANAGER_CLASS, None)
    original = getattr(manager, CHECKED_METHOD, None)
    if not isinstance(original, types.FunctionType):
        logger.warning(
            "mori-ep's vLLM plugin: this vLLM has no %s.%s.%s; nothing changed",
            ALL2ALL_MODULE,
            MANAGER_CLASS,
            CHECKED_METHOD,
        )
        return False
    if getattr(original, _RELAXED_MARK, False):
        return True  # vLLM loads general plugins more than once per process
    on_nvidia = _importing_nvidia_predicates(original)

    @functools.wraps(original)
    def make_all2all_kwargs(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _on_nvidia():
            return on_nvidia(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    setattr(make_all2all_kwargs, _RELAXED_MARK, True)
    setattr(manager, CHECKED_METHOD, make_all2all_kwargs)
    logger.info(
        "mori-ep's vLLM plugin: %s.%s now passes its gfx942/gfx950 check on NVIDIA GPUs "
        "(multi-node geometry: the gfx942 branch); other platforms unchanged",
        MANAGER_CLASS,
        CHECKED_METHOD,
    )
    return True


def register() -> None:
    """The ``vllm.general_plugins`` entry point."""
    relax_mori_arch_check()
