# SPDX-License-Identifier: MIT
"""Launch geometry of one v2 call, as the per-call ``block_num`` / ``warp_per_block`` of v1.

MORI's v2 rules: with every geometry field None and no schedule, the backend picks (here: v1's
choice, i.e. its tuning files in AUTO mode, else its config defaults); pinning any field fills
the others with 64 / 80 / 16 / 4; a schedule picks a bucket per call from the token count.
"""

from __future__ import annotations

from dataclasses import dataclass

from mori.ep.v2.config import PINNED_FILL, EpDispatchCombineConfig

#: v1's "no preference" value for a per-call geometry argument.
V1_DEFAULT = -1


@dataclass(frozen=True)
class Geometry:
    dispatch_blocks: int = V1_DEFAULT
    dispatch_warps: int = V1_DEFAULT
    combine_blocks: int = V1_DEFAULT
    combine_warps: int = V1_DEFAULT


def for_tokens(config: EpDispatchCombineConfig, tokens: int) -> Geometry:
    """The geometry of a call moving ``tokens`` rows. A schedule wins over pinned fields."""
    if config.schedule is not None:
        for bound, *sizes in config.schedule:
            if bound is None or tokens <= bound:
                return Geometry(*sizes)
        return Geometry(*config.schedule[-1][1:])  # past the last bound: the largest bucket
    pinned = {name: getattr(config, name) for name in PINNED_FILL}
    if all(value is None for value in pinned.values()):
        return Geometry()
    filled = {name: PINNED_FILL[name] if value is None else value for name, value in pinned.items()}
    return Geometry(
        dispatch_blocks=filled["dispatch_block_num"],
        dispatch_warps=filled["warp_num_per_block"],
        combine_blocks=filled["combine_block_num"],
        combine_warps=filled["combine_warp_num_per_block"],
    )
