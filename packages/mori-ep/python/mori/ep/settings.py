# SPDX-License-Identifier: MIT
"""mori-ep's environment variables, declared once with the shared mechanism (:mod:`mori.settings`).

Library code reads settings only through :func:`setting`, so each variable has one name, one
default and one doc; ``python -m mori.ep env`` prints the effective values. MORI_ENABLE_PROFILER
MORI_SKIP_ABI_CHECK and MORI_ENABLE_SDMA are shared with other packages (:mod:`mori.settings.shared`).
"""

from __future__ import annotations

from typing import Any

from mori.ep.errors import EpConfigError
from mori.settings import Registry, Setting

REGISTRY = Registry(
    "mori-ep",
    (
        Setting(
            "MORI_EP_LAUNCH_CONFIG_MODE",
            "choice",
            "MANUAL",
            "MANUAL: launch geometry from the per-call arguments, else the config. AUTO: from the tuning "
            "JSON for this GPU (MORI_EP_TUNING_CONFIG or the shipped files), else per-call/config values.",
            choices=("MANUAL", "AUTO"),
        ),
        Setting(
            "MORI_EP_TUNING_CONFIG",
            "path",
            "",
            "Directory of tuning JSON files to use in AUTO mode instead of the shipped one.",
        ),
        Setting(
            "MORI_EP_TIMEOUT",
            float,
            60.0,
            "Seconds a dispatch or combine waits for a peer before it fails (cpu: raises EpTimeoutError; "
            "cuda: the kernel ends and check_error() raises it). 0 waits forever.",
            low=0,
        ),
        Setting(
            "MORI_EP_VALIDATE_INDICES",
            bool,
            True,
            "Check expert ids on the host before a dispatch (a device sync on the cuda backend; skipped "
            "under CUDA graph capture). Kernels skip out-of-range ids either way and record the error.",
        ),
        Setting(
            "MORI_FP8_COMBINE_SCALE_DIM",
            int,
            56,
            "Scale blocks per row of the fp8_blockwise and fp4_blockwise combine formats "
            "(56 blocks of 128 at hidden 7168).",
            low=0,
        ),
        Setting(
            "MORI_V2_KERNEL_BACKEND",
            str,
            "",
            "Kernel backend of EP v2 ops whose config leaves kernel_backend=None. This build has one, 'v1' "
            "(mori.ep's kernels, on the cpu or cuda backend of mori.shmem); MORI's 'flydsl' and 'hip' "
            "raise EpUnsupportedError when an op is created. MORI's other v2 variables steer its AMD "
            "kernel builds and have no effect (below).",
        ),
        # MORI's v2 variables for its AMD kernel builds: accepted, no effect here (a note when set).
        Setting(
            "MORI_V2_LIB_DIR",
            str,
            "",
            "MORI: where libmori_ops_v2.so lives. No effect: this build has no such library.",
        ),
        Setting(
            "MORI_WAVE_SIZE",
            str,
            "",
            "MORI: the AMD wavefront size of v2's kernels. No effect: CUDA warps are 32.",
        ),
        Setting(
            "MORI_V2_EP_DISP_BLOCKS",
            str,
            "",
            "MORI: v2 HIP dispatch blocks. No effect: use the config's geometry.",
        ),
        Setting(
            "MORI_V2_EP_DISP_WARPS",
            str,
            "",
            "MORI: v2 HIP dispatch warps. No effect: use the config's geometry.",
        ),
        Setting(
            "MORI_V2_EP_COMB_BLOCKS",
            str,
            "",
            "MORI: v2 HIP combine blocks. No effect: use the config's geometry.",
        ),
        Setting(
            "MORI_V2_EP_COMB_WARPS",
            str,
            "",
            "MORI: v2 HIP combine warps. No effect: use the config's geometry.",
        ),
    ),
    error=EpConfigError,
    shared=("MORI_ENABLE_PROFILER", "MORI_SKIP_ABI_CHECK", "MORI_ENABLE_SDMA"),
)


def setting(name: str) -> Any:
    """The effective value of registered variable ``name``: parsed from the environment (or a
    ``mori.settings.override``) if set and non-empty, else the default. A malformed value raises
    ``EpConfigError`` naming it."""
    return REGISTRY.get(name)


#: Config fields accepted for MORI's sake that change nothing here: (field, MORI's default, why).
CONFIG_FIELDS_WITHOUT_EFFECT: tuple[tuple[str, Any, str], ...] = (
    (
        "num_qp_per_pe",
        1,
        "mori-ep reaches other hosts through mori-shmem's remote transport (device proxy and host "
        "conduit), which has no per-peer queue-pair count to choose",
    ),
)


def note_settings_without_effect(config: Any) -> None:
    """Logs once (mori._compat.note_no_effect) each accepted setting that is set to a value other
    than MORI's default and has no effect here."""
    from mori._compat import note_no_effect

    for name, default, reason in CONFIG_FIELDS_WITHOUT_EFFECT:
        value = getattr(config, name)
        if value != default:
            note_no_effect(f"EpDispatchCombineConfig.{name}", value, reason)
    if setting("MORI_ENABLE_SDMA"):
        note_no_effect(
            "MORI_ENABLE_SDMA",
            setting("MORI_ENABLE_SDMA"),
            "there is no copy-engine path: AsyncLL moves its data through mori-shmem's transport",
        )


def note_geometry_without_effect(call: str, block_num: int, warp_per_block: int, reason: str) -> None:
    """Logs once (mori._compat.note_no_effect) launch-geometry arguments that a call accepts for
    MORI's signature but does not use, when they are not MORI's default -1."""
    from mori._compat import note_no_effect

    for name, value in (("block_num", block_num), ("warp_per_block", warp_per_block)):
        if value != -1:
            note_no_effect(f"{call}({name}=)", value, reason)
