# SPDX-License-Identifier: MIT
"""Where the mori-shmem SDK (headers, shared library, pkg-config file) lives in this install.

Packages that build against mori-shmem ask these functions at build time, the way numpy and
pybind11 expose ``get_include()``; ``mori-shmem-config`` prints the same for other build systems.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent


def get_include() -> str:
    """Directory to add to the include path: it holds ``mori_shmem/mori_shmem.h``."""
    return str(_ROOT / "include")


def get_library_dir() -> str:
    """Directory that holds ``libmori_shmem.so``."""
    return str(_ROOT / "lib")


def get_library_path() -> str:
    """Full path of ``libmori_shmem.so``."""
    return str(_ROOT / "lib" / "libmori_shmem.so")


def get_pkgconfig_dir() -> str:
    """Directory of ``mori-shmem.pc`` (relocatable: its prefix is computed from its own path)."""
    return str(_ROOT / "lib" / "pkgconfig")


def _abi_version() -> int:
    header = (_ROOT / "include" / "mori_shmem" / "version.h").read_text()
    for line in header.splitlines():
        if line.startswith("#define MORI_SHMEM_ABI_VERSION"):
            return int(line.split()[2])
    raise RuntimeError(f"MORI_SHMEM_ABI_VERSION missing from {_ROOT / 'include' / 'mori_shmem' / 'version.h'}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``mori-shmem-config``."""
    from mori.shmem import __version__

    parser = argparse.ArgumentParser(prog="mori-shmem-config", description="Build flags of the mori-shmem SDK")
    for flag in ("cflags", "libs", "includedir", "libdir", "pkgconfigdir", "abi-version", "version"):
        parser.add_argument(f"--{flag}", action="store_true")
    args = parser.parse_args(argv)
    answers = {
        "cflags": f"-I{get_include()}",
        "libs": f"-L{get_library_dir()} -Wl,-rpath,{get_library_dir()} -lmori_shmem",
        "includedir": get_include(),
        "libdir": get_library_dir(),
        "pkgconfigdir": get_pkgconfig_dir(),
        "abi_version": str(_abi_version()),
        "version": __version__,
    }
    chosen = [value for key, value in answers.items() if getattr(args, key)]
    if not chosen:
        parser.print_help()
        return 1
    sys.stdout.write("\n".join(chosen) + "\n")
    return 0
