# SPDX-License-Identifier: MIT
"""Import-time check that the bitcode shipped in this wheel matches the installed mori-shmem.

The bitcode reads mori-shmem's device state with the layout of the headers it was compiled
against; a mori-shmem with another ABI version lays it out differently, and a kernel linking the
old bitcode would read wrong fields silently. So, as mori-ep and mori-cco do for their compiled
code, a mismatch is an ImportError (MORI_SKIP_ABI_CHECK=1 skips it, for debugging).
"""

from __future__ import annotations

from mori.ir.settings import setting

SKIP_ENV = "MORI_SKIP_ABI_CHECK"


def built_abi_version() -> int | None:
    """The mori-shmem ABI the shipped bitcode was built against; None when none is shipped."""
    try:
        from mori.ir import _build_info  # generated at build time; absent in a source tree
    except ImportError:
        return None
    return _build_info.SHMEM_ABI_VERSION


def check_abi(built: int | None, found: int) -> None:
    """Raise ImportError when shipped bitcode was built for another mori-shmem ABI than ``found``."""
    if built is None or built == found or setting(SKIP_ENV):
        return
    raise ImportError(
        f"mori-ir's shipped bitcode was built against mori-shmem ABI {built}, found {found} "
        f"(mori.shmem.__abi_version__): install the mori-ir release built for this mori-shmem series "
        f"(set {SKIP_ENV}=1 to import anyway)"
    )
