# SPDX-License-Identifier: MIT
"""mori.cco: communicators with device-side one-sided communication (MORI's CCO), collectives on
them, and a fused GEMM + all-reduce.

Quick start (every rank; the unique id travels out of band, e.g. a file or torch.distributed)::

    uid = mori.cco.get_unique_id()                 # on rank 0
    with mori.cco.Communicator.init(nranks, rank, uid) as comm:
        x = torch.ones(1024, device="cuda")
        comm.all_reduce(x)                         # in place: sum over ranks
        mem = comm.alloc_mem(1 << 20)              # the same offset in every rank's slot
        win = comm.register_window(mem.ptr, mem.size)
        dev = comm.create_dev_comm()               # pass dev.struct by value to your kernels
"""

from __future__ import annotations

# mori.shmem first: it preloads its libmori_shmem.so with RTLD_GLOBAL so _C binds to that copy.
import mori.shmem as _shmem
from mori._version import distribution_version
from mori.cco import _C
from mori.cco.communicator import (
    AllocatedMemory,
    CCODevCommRequirements,
    Communicator,
    DevCommHandle,
    RegisteredWindow,
    UniqueId,
    get_unique_id,
)
from mori.cco.errors import (
    CcoDeviceError,
    CcoError,
    CcoInvalidArgumentError,
    CcoOutOfMemoryError,
    CcoPeerLostError,
    CcoSymmetryError,
    CcoTimeoutError,
    CcoUnsupportedError,
)
from mori.cco.gemm_all_reduce import gemm_all_reduce
from mori.cco.layout import (
    GDA_CONNECTION_CROSSNODE,
    GDA_CONNECTION_FULL,
    GDA_CONNECTION_NONE,
    GDA_CONNECTION_RAIL,
)
from mori.cco.sdk import get_include, get_library_dir

__version__ = distribution_version("mori-cco")

__all__ = [
    "GDA_CONNECTION_CROSSNODE",
    "GDA_CONNECTION_FULL",
    "GDA_CONNECTION_NONE",
    "GDA_CONNECTION_RAIL",
    "AllocatedMemory",
    "CCODevCommRequirements",
    "CcoDeviceError",
    "CcoError",
    "CcoInvalidArgumentError",
    "CcoOutOfMemoryError",
    "CcoPeerLostError",
    "CcoSymmetryError",
    "CcoTimeoutError",
    "CcoUnsupportedError",
    "Communicator",
    "DevCommHandle",
    "RegisteredWindow",
    "UniqueId",
    "gemm_all_reduce",
    "get_include",
    "get_library_dir",
    "get_unique_id",
]

if _C.built_abi_version() != _C.loaded_abi_version() or _C.loaded_abi_version() != _shmem.__abi_version__:
    raise ImportError(
        f"mori-cco was built against mori-shmem ABI {_C.built_abi_version()}, found "
        f"{_C.loaded_abi_version()} ({_C.loaded_library_path()})"
    )
