# SPDX-License-Identifier: MIT
"""mori.shmem: symmetric memory across processes (PEs), with MORI's API.

Quick start::

    uid = shmem_get_unique_id()                 # once, in rank 0 or the launcher
    shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, uid)
    buf = shmem_zeros(1024, "float32")          # collective, same offset on every PE
    shmem_put(buf, numpy_array, pe=(rank + 1) % nranks)
    shmem_barrier_all()
    shmem_finalize()
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version

from mori.shmem._native import _C
from mori.shmem._sdk import get_include, get_library_dir, get_library_path, get_pkgconfig_dir
from mori.shmem.api import *  # noqa: F403
from mori.shmem.api import __all__ as _api_all
from mori.shmem.buffer import SymmetricBuffer, shmem_empty, shmem_get, shmem_put, shmem_zeros
from mori.shmem.device import (
    DeviceState,
    shmem_barrier_on_stream,
    shmem_check_device_error,
    shmem_cuda_available,
    shmem_cuda_device,
    shmem_device_state,
    shmem_module_init,
)
from mori.shmem.errors import *  # noqa: F403
from mori.shmem.errors import __all__ as _errors_all
from mori.shmem.frameworks import shmem_mpi_init, shmem_torch_process_group_init
from mori.shmem.proxy_hazards import device_proxy_hazards
from mori.shmem.torch_tensors import (
    mori_shmem_create_tensor,
    mori_shmem_create_tensor_list_intra_node,
    mori_shmem_free_tensor,
    symm_mori_shmem_tensor,
)
from mori.shmem.unique_id import describe_unique_id, unique_id_with_secret

logging.getLogger("mori.shmem").addHandler(logging.NullHandler())

try:
    __version__ = version("mori-shmem")
except PackageNotFoundError:  # running from a build tree
    __version__ = _C.version()
__abi_version__: int = _C.abi_version()


@contextlib.contextmanager
def session(rank: int, nranks: int, unique_id: bytes) -> Iterator[None]:
    """Collective: ``shmem_init_attr`` on entry, ``shmem_finalize`` on exit."""
    from mori.shmem.api import MORI_SHMEM_INIT_WITH_UNIQUEID, shmem_finalize, shmem_init_attr

    shmem_init_attr(MORI_SHMEM_INIT_WITH_UNIQUEID, rank, nranks, unique_id)
    try:
        yield
    finally:
        shmem_finalize()


__all__ = [
    *_api_all,
    *_errors_all,
    "DeviceState",
    "SymmetricBuffer",
    "get_include",
    "get_library_dir",
    "get_library_path",
    "get_pkgconfig_dir",
    "mori_shmem_create_tensor",
    "mori_shmem_create_tensor_list_intra_node",
    "mori_shmem_free_tensor",
    "session",
    "shmem_barrier_on_stream",
    "shmem_check_device_error",
    "shmem_cuda_available",
    "shmem_cuda_device",
    "shmem_device_state",
    "shmem_empty",
    "shmem_get",
    "shmem_module_init",
    "shmem_mpi_init",
    "shmem_put",
    "shmem_torch_process_group_init",
    "shmem_zeros",
    "symm_mori_shmem_tensor",
    "describe_unique_id",
    "device_proxy_hazards",
    "unique_id_with_secret",
]
