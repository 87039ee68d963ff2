# SPDX-License-Identifier: MIT
"""``mori.cpp``: MORI's compiled-module names, each resolved lazily from the package that implements it.

MORI's code reaches some classes only through its pybind module (``from mori.cpp import
TransferStatus``). Here each name is implemented by one mori package; this module maps the name to
it, importing that package on first use, so ``mori.cpp`` never drags in packages a program does not
use. A name whose wheel is absent raises an ImportError naming the wheel.
"""

from __future__ import annotations

import importlib
from typing import Any

from mori._subpackages import SUBPACKAGES, missing_wheel_error

_IO = "mori.io"
_UMBP = "mori.umbp"
_EP = "mori.ep.cpp_names"

_SHMEM = "mori.shmem"

#: MORI's ``mori.cpp`` name -> the module that implements it here.
NAMES: dict[str, str] = {
    # mori-shmem (MORI's pybind_shmem)
    "shmem_mype": _SHMEM,
    "shmem_npes": _SHMEM,
    "shmem_num_qp_per_pe": _SHMEM,
    "shmem_finalize": _SHMEM,
    "shmem_torch_process_group_init": _SHMEM,
    # mori-io (MORI's pybind_io)
    "IOEngineConfig": _IO,
    "StatusCode": _IO,
    "BackendType": _IO,
    "EngineDesc": _IO,
    "MemoryDesc": _IO,
    "MemoryLocationType": _IO,
    "PollCqMode": _IO,
    "RdmaBackendConfig": _IO,
    "XgmiBackendConfig": _IO,
    "FabricBackendConfig": _IO,
    "TcpBackendConfig": _IO,
    "TransferStatus": _IO,
    "set_log_level": _IO,
    # mori-umbp (MORI's pybind_umbp)
    "UMBPClient": _UMBP,
    "UMBPConfig": _UMBP,
    "UMBPDeploymentMode": _UMBP,
    "UMBPDistributedConfig": _UMBP,
    "UMBPDramConfig": _UMBP,
    "UMBPSsdConfig": _UMBP,
    "UMBPEvictionConfig": _UMBP,
    "UMBPTierType": _UMBP,
    "UMBPExternalKvMatch": _UMBP,
    "UMBPExternalKvNodeMatch": _UMBP,
    "UMBPExternalKvHitCountEntry": _UMBP,
    "UMBPMasterClient": _UMBP,
    "UMBPMasterClientConfig": _UMBP,
    "UMBPIoEngineConfig": _UMBP,
    "UMBPHostMemAllocator": _UMBP,
    "UMBPHostBufferHandle": _UMBP,
    "UMBPHostBufferBacking": _UMBP,
    "UMBPIoConfig": _UMBP,
    "UMBPIoBackend": _UMBP,
    "UMBPRole": _UMBP,
    "UMBPSsdLayoutMode": _UMBP,
    "UMBPDurabilityMode": _UMBP,
    "UMBPDurabilityConfig": _UMBP,
    "UMBPCopyPipelineConfig": _UMBP,
    "UMBPStandaloneProcessConfig": _UMBP,
    "CacheRemoteAdmission": _UMBP,
    # mori-ep (MORI's pybind_ops): the C++ config with a default for every field, and free functions
    "EpDispatchCombineConfig": _EP,
    "EpDispatchCombineKernelType": _EP,
    "EpDispatchCombineQuantType": _EP,
    "launch_local_expert_count": _EP,
    "get_debug_time_buf": _EP,
    "get_debug_time_offset": _EP,
}

#: The ``mori.<name>`` subpackage whose wheel provides each module above.
_SUBPACKAGE_OF = {"mori.shmem": "shmem", "mori.io": "io", "mori.umbp": "umbp", "mori.ep.cpp_names": "ep"}


def __getattr__(name: str) -> Any:
    module_name = NAMES.get(name)
    if module_name is None:
        raise AttributeError(f"mori.cpp has no name {name!r} (MORI's mori.cpp names here: {', '.join(sorted(NAMES))})")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        sub = _SUBPACKAGE_OF[module_name]
        if exc.name is not None and SUBPACKAGES[sub].module.startswith(exc.name):
            raise missing_wheel_error(sub) from exc
        raise
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"mori.cpp.{name} should come from {module_name}, which does not define it") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *NAMES})
