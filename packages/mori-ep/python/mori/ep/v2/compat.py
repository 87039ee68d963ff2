# SPDX-License-Identifier: MIT
"""The v2 settings accepted for compatibility with MORI that have no effect here, noted once each
(``mori._compat.note_no_effect``) when a program sets them; docs/user-guide/compatibility.md says
why for each."""

from __future__ import annotations

from mori._compat import note_no_effect
from mori.ep.settings import setting
from mori.ep.v2.config import PINNED_FILL, EpDispatchCombineConfig

#: MORI's environment variables for its AMD v2 builds (registered in mori.ep.settings).
AMD_BUILD_VARIABLES = {
    "MORI_V2_LIB_DIR": "this build has no libmori_ops_v2.so; v2 runs on mori.ep's kernels",
    "MORI_WAVE_SIZE": "it sizes AMD wavefronts; CUDA warps are 32 threads",
    "MORI_V2_EP_DISP_BLOCKS": "it steers MORI's HIP dispatch; set the config's dispatch_block_num",
    "MORI_V2_EP_DISP_WARPS": "it steers MORI's HIP dispatch; set the config's warp_num_per_block",
    "MORI_V2_EP_COMB_BLOCKS": "it steers MORI's HIP combine; set the config's combine_block_num",
    "MORI_V2_EP_COMB_WARPS": "it steers MORI's HIP combine; set the config's combine_warp_num_per_block",
}
_COMBINE_GEOMETRY = ("combine_block_num", "combine_warp_num_per_block")


def note_inert_settings(cfg: EpDispatchCombineConfig, backend: str) -> None:
    """Notes each setting of this op that is set and has no effect on ``backend`` ("cpu"/"cuda")."""
    for name, reason in AMD_BUILD_VARIABLES.items():
        value = setting(name)
        if value:
            note_no_effect(name, value, reason)
    geometry = {name: getattr(cfg, name) for name in PINNED_FILL}
    geometry["schedule"] = cfg.schedule
    for name, value in geometry.items():
        if value is None:
            continue
        if backend == "cpu":
            note_no_effect(
                f"EpDispatchCombineConfig.{name}", value, "the cpu backend runs each call on one host thread"
            )
        elif cfg.is_scatter and name in _COMBINE_GEOMETRY:  # a schedule still sets dispatch geometry
            note_no_effect(
                f"EpDispatchCombineConfig.{name}",
                value,
                "combine_mode='scatter' (or a quant_type) combines with torch operations, not a kernel launch; "
                "the dispatch geometry still applies",
            )
