# SPDX-License-Identifier: MIT
"""Raw ``uint8`` dispatch rows of any width. The kernels move rows in 16-byte vectors, so a row
width that is not a multiple of 16 travels padded to one: dispatch copies the rows into a padded
tensor (a device copy, graph-safe) and returns views of the received rows cut back to the caller's
width. The pad bytes are zeros and never reach the caller."""

from __future__ import annotations

from typing import Any

from mori.ep.config import EpDispatchCombineConfig
from mori.ep.errors import EpInputError

VECTOR_BYTES = 16


def needs_padding(input: Any) -> bool:
    return str(input.dtype) == "torch.uint8" and int(input.shape[1]) % VECTOR_BYTES != 0


def padded(input: Any, config: EpDispatchCombineConfig) -> Any:
    """``input`` [N, W] uint8 as [N, W rounded up to 16] (zeros after column W), within the op's row capacity."""
    import torch

    width = int(input.shape[1])
    wide = -(-width // VECTOR_BYTES) * VECTOR_BYTES
    capacity = -(-config.hidden_dim * config.max_token_type_size // VECTOR_BYTES) * VECTOR_BYTES  # Layout's row
    if wide > capacity:
        raise EpInputError(
            f"input has {width}-byte uint8 rows, which travel padded to {wide} bytes; the op's rows hold "
            f"config.hidden_dim * max_token_type_size rounded up to 16 = {capacity} bytes"
        )
    out = torch.zeros(int(input.shape[0]), wide, dtype=torch.uint8, device=input.device)
    out[:, :width].copy_(input)
    return out
