# SPDX-License-Identifier: MIT
"""mori: GPU communication libraries for large-model serving and training (after AMD's MORI).

``import mori`` is cheap: each subpackage is imported on first attribute access, from whichever
``mori-*`` wheels are installed (``mori.shmem``, ``mori.ops``, ``mori.io``, ...). A subpackage whose
wheel is absent raises an :class:`ImportError` that names the wheel to install. ``mori.cpp`` holds
MORI's compiled-module names, each resolved from the package that implements it.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

from mori import _logging
from mori._subpackages import SUBPACKAGES, install_missing_wheel_hint, missing_wheel_error
from mori._version import distribution_version
from mori.settings import shared as _shared_settings

# Wheels installed into separate directories (pip --target, PYTHONPATH layers) still join.
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = distribution_version("mori")

_logging.configure()
install_missing_wheel_hint()


def __getattr__(name: str) -> ModuleType:
    target = SUBPACKAGES.get(name)
    if target is None:
        raise AttributeError(f"module 'mori' has no attribute {name!r}")
    try:
        module = importlib.import_module(target.module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and target.module.startswith(exc.name):
            raise missing_wheel_error(name) from exc
        raise
    globals()[name] = module
    return module


def get_include() -> str:
    """The folder to put on a C++ include path for the header-only code every native mori package
    builds against (numpy's pattern): ``<mori/cuda_driver.hpp>`` (the CUDA driver opened with
    dlopen), ``<mori/ucx_api.hpp>`` (UCX's UCP API and its loader) and ``<mori/hmac_sha256.hpp>``."""
    return str(Path(__file__).resolve().parent / "include")


def __dir__() -> list[str]:
    return sorted({*globals(), *SUBPACKAGES})


if _shared_settings.get("MORI_PRECOMPILE"):
    # MORI's switch: fill the JIT cache with every declared kernel when mori is imported.
    from mori._precompile import precompile_declared_kernels

    precompile_declared_kernels()
