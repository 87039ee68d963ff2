"""Import-time check that mori.ep._C is bound to the right, single copy of libmori_shmem.so.

Two copies of libmori_shmem would mean two symmetric heaps and two bootstraps in one process,
which corrupts silently; an ABI mismatch would misread structs. Both are turned into an
ImportError here, before any EP code runs (DeepEP's duplicate-NCCL check, JAX's version check).
"""

from __future__ import annotations

import os
from pathlib import Path

#: Set to 1 to skip the check (e.g. when debugging a deliberately mixed install). This is mori-ep's
#: only environment variable so far; it moves into the package's env registry when that exists.
SKIP_ENV = "MORI_SKIP_ABI_CHECK"

_LIBRARY_NAME = "libmori_shmem.so"


def mapped_library_paths(maps_file: str = "/proc/self/maps", name: str = _LIBRARY_NAME) -> set[str] | None:
    """Return the distinct real paths of mapped files called ``name``, or None without /proc."""
    try:
        text = Path(maps_file).read_text()
    except OSError:
        return None
    paths = set()
    for line in text.splitlines():
        # Format: address perms offset dev inode [path]; the path may contain spaces.
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and os.path.basename(fields[5]) == name:
            paths.add(os.path.realpath(fields[5]))
    return paths


def check_abi(built: int, loaded: int, python_abi: int, mapped: set[str] | None) -> None:
    """Raise ImportError unless the build-time, linked and Python-side ABI versions agree and
    exactly one libmori_shmem.so is mapped. Does nothing when MORI_SKIP_ABI_CHECK=1."""
    from mori.ep.settings import setting

    if setting(SKIP_ENV):
        return
    hint = f" (set {SKIP_ENV}=1 to import anyway)"
    if built != loaded:
        raise ImportError(f"mori-ep was built against mori-shmem ABI {built}, found {loaded}{hint}")
    if loaded != python_abi:
        raise ImportError(
            f"mori-ep was built against mori-shmem ABI {built}, found {python_abi} "
            f"(mori.shmem.__abi_version__; the loaded library reports {loaded}){hint}"
        )
    if mapped is not None and len(mapped) != 1:
        raise ImportError(
            f"mori-ep expects exactly one {_LIBRARY_NAME} mapped in this process, found {len(mapped)}: "
            f"{sorted(mapped)}{hint}"
        )
