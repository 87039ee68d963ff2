# SPDX-License-Identifier: MIT
"""mori.ep: expert-parallel dispatch/combine on the mori-shmem symmetric heap (MORI's ``mori.ops``).

Quick start (every PE, after ``mori.shmem`` is initialised)::

    config = EpDispatchCombineConfig(data_type=torch.bfloat16, rank=rank, world_size=n, hidden_dim=7168,
                                     scale_dim=0, scale_type_size=0, max_token_type_size=2,
                                     max_num_inp_token_per_rank=4096, num_experts_per_rank=256 // n,
                                     num_experts_per_token=8)
    op = EpDispatchCombineOp(config)
    out, out_w, _, out_idx, total = op.dispatch(x, weights, None, indices)
    ...                                   # experts on out[:total]
    y, y_w = op.combine(expert_out, out_w, indices)
"""

from __future__ import annotations

# Order matters: mori.shmem (sorted first) preloads its libmori_shmem.so with RTLD_GLOBAL, so
# that _C's DT_NEEDED entry binds to that copy instead of any other one on the search path.
import mori.shmem as _shmem
from mori._version import distribution_version
from mori.ep import _C
from mori.ep import errors as _errors
from mori.ep._abi_check import check_abi, mapped_library_paths
from mori.ep.config import (
    EpDispatchCombineConfig,
    EpDispatchCombineKernelType,
    EpDispatchCombineQuantType,
)
from mori.ep.errors import *  # noqa: F403  (the error classes; errors.__all__ lists them once)
from mori.ep.kernels import warmup_jit_kernels
from mori.ep.op import EpDispatchCombineOp
from mori.ep.routing import EpDispatchRoutingHandle

__version__ = distribution_version("mori-ep")

__all__ = [
    "EpDispatchCombineConfig",
    "EpDispatchCombineKernelType",
    "EpDispatchCombineOp",
    "EpDispatchCombineQuantType",
    "EpDispatchRoutingHandle",
    "warmup_jit_kernels",
    *_errors.__all__,
]

check_abi(
    built=_C.built_abi_version(),
    loaded=_C.loaded_abi_version(),
    python_abi=_shmem.__abi_version__,
    mapped=mapped_library_paths(),
)
