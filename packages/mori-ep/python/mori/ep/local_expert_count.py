# SPDX-License-Identifier: MIT
"""How many received rows picked each local expert: the op's ``call_local_expert_count`` and
MORI's free function ``launch_local_expert_count`` share this count."""

from __future__ import annotations

from typing import Any


def count_local_experts(indices: Any, total_recv: Any, out: Any, rank: int, experts_per_rank: int) -> None:
    """``out[e] = #{(row, k): row < total_recv, indices[row, k] // experts_per_rank == rank,
    e = indices[row, k] - rank * experts_per_rank}`` (-1 and other PEs' experts do not count).
    ``total_recv`` is a one-element int32 tensor read on the device, so no host sync happens."""
    import torch

    device = indices.device
    valid_row = torch.arange(indices.shape[0], device=device) < total_recv.reshape(-1)[0]
    local = indices - rank * experts_per_rank
    valid = valid_row[:, None] & (indices >= 0) & (local >= 0) & (local < experts_per_rank)
    slots = torch.where(valid, local, experts_per_rank).reshape(-1).long()
    counts = torch.zeros(experts_per_rank + 1, dtype=torch.int32, device=device)
    counts.scatter_add_(0, slots, torch.ones_like(slots, dtype=torch.int32))
    out.copy_(counts[:experts_per_rank])
