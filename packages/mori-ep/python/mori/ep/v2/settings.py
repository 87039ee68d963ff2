# SPDX-License-Identifier: MIT
"""The environment variables of the v2 API (MORI's names), read only here.

MORI's other v2 variables (``MORI_V2_LIB_DIR``, ``MORI_V2_EP_{DISP,COMB}_{BLOCKS,WARPS}``,
``MORI_WAVE_SIZE``) steer its AMD kernel builds and are not read: v2 runs the v1 kernels, whose
settings are mori.ep's (``python -m mori.ep env``).
"""

from __future__ import annotations

import os

from mori.ep.settings import Setting

REGISTRY: tuple[Setting, ...] = (
    Setting(
        "MORI_V2_KERNEL_BACKEND",
        str,
        "",
        "Kernel backend of v2 ops whose config leaves kernel_backend=None. This build has one, 'v1' "
        "(mori.ep's kernels, on the cpu or cuda backend of mori.shmem); MORI's 'flydsl' and 'hip' "
        "raise EpUnsupportedError when an op is created.",
    ),
)


def kernel_backend_from_env() -> str | None:
    """``MORI_V2_KERNEL_BACKEND`` lower-cased, or None when unset or empty (the config checks the value)."""
    text = os.environ.get("MORI_V2_KERNEL_BACKEND", "").strip().lower()
    return text or None


def effective() -> list[tuple[str, str, str]]:
    """(name, effective value, doc) of every v2 variable."""
    return [(entry.name, os.environ.get(entry.name, "") or str(entry.default), entry.doc) for entry in REGISTRY]
