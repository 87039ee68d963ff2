# SPDX-License-Identifier: MIT
"""MORI's v2 geometry lookup (``tuning_configs.lookup``), for this build's GPUs.

MORI keeps measured per-token schedules for AMD parts and falls back to a geometry scaled to the
GPU's compute units for any other device. No AMD part runs here, so every lookup is that
fallback, scaled to the CUDA device's streaming multiprocessors: a block per SM for dispatch and
combine, 16 and 4 warps, no schedule. ``EpDispatchCombineConfig.tuned`` does not call it: a
config whose geometry is left None takes mori.ep's own tuning (docs/user-guide/ep.md).
"""

from __future__ import annotations

from typing import Any

#: MORI's count when it cannot read the device (its MI308X has 80 compute units).
FALLBACK_UNITS = 80


def _multiprocessors() -> int:
    """Streaming multiprocessors of the current CUDA device (0 without one)."""
    try:
        import torch
    except ImportError:
        return 0
    if not torch.cuda.is_available():
        return 0
    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


def lookup(world_size: int, hidden_dim: int, topk: int, dtype: str = "fp8") -> dict[str, Any]:
    """``{dispatch_block_num, combine_block_num, warp_num_per_block, combine_warp_num_per_block,
    schedule}`` for the current GPU, as MORI's lookup returns them. The shape and ``dtype`` select
    a measured table in MORI; this build has none, so they do not change the answer."""
    del world_size, hidden_dim, topk, dtype  # keys of MORI's AMD tables
    units = _multiprocessors() or FALLBACK_UNITS
    return {
        "dispatch_block_num": units,
        "combine_block_num": units,
        "warp_num_per_block": 16,
        "combine_warp_num_per_block": 4,
        "schedule": None,
    }


__all__ = ["lookup"]
