# SPDX-License-Identifier: MIT
"""mori.jax: mori-ep's dispatch and combine inside ``jax.jit`` (MORI's ``mori.jax``), as the XLA
FFI custom call ``mori_ep`` on JAX's CPU platform (mori-ep's cpu backend) and its CUDA platform.

Install with ``pip install "mori-ep[jax]"``. Creating the first op (or ``preload_kernels()``)
registers the target, building its handler at first use on a machine (ffi_build.py says why)::

    import mori.jax
    op = mori.jax.EpDispatchCombineOp(config)          # collective, after mori.shmem is initialised
    out, out_idx, total, out_w, _ = jax.jit(op.dispatch)(x, w, None, idx)
    y, y_w = jax.jit(op.combine)(expert_out, out_w, idx)
"""

from __future__ import annotations

try:
    import jax  # noqa: F401
except ImportError as exc:  # jax is an extra of mori-ep, never a requirement
    raise ImportError(f'mori.jax needs jax: pip install "mori-ep[jax]" ({exc})') from exc

from mori.jax.handlers import mori_ep_handler, mori_ep_type_info, preload_kernels
from mori.jax.ops import EpDispatchCombineOp, shmem_finalize, shmem_init_attr

__all__ = [
    "EpDispatchCombineOp",
    "mori_ep_handler",
    "mori_ep_type_info",
    "preload_kernels",
    "shmem_finalize",
    "shmem_init_attr",
]
