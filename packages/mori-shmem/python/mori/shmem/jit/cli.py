# SPDX-License-Identifier: MIT
"""``mori-jit``: inspect the JIT, fill its cache ahead of time, or empty it.

Commands: ``mori-jit info``; ``mori-jit precompile [--arch sm_90] [--compiler nvrtc|nvcc]
[--jobs N] [--only PATTERN]``; ``mori-jit clear-cache``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence

from mori.shmem.errors import MoriShmemError
from mori.shmem.jit import driver
from mori.shmem.jit.api import resolve_arch
from mori.shmem.jit.cache import cache_root, cache_usage, clear
from mori.shmem.jit.compiler import Compiler, compiler_choice, find_compiler, find_nvcc, find_nvrtc
from mori.shmem.jit.registry import ENTRY_POINT_GROUP, PrecompileResult, discover, precompile
from mori.shmem.settings import setting


def _write(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _describe_or_error(find: Callable[[], Compiler | None]) -> str:
    try:
        found = find()
    except MoriShmemError as exc:
        return f"error: {exc}"
    return found.describe() if found is not None else "not found"


def _info() -> int:
    try:
        chosen = find_compiler().describe()
    except MoriShmemError as exc:
        chosen = f"none: {exc}"
    arch, origin = resolve_arch()
    cubins, size = cache_usage()
    rows = [
        ("compiler", f"{chosen}  [MORI_JIT_COMPILER={compiler_choice()}]"),
        ("nvrtc", _describe_or_error(find_nvrtc)),
        ("nvcc", _describe_or_error(find_nvcc)),
        ("arch", f"{arch}  [{origin}]"),
        ("cache dir", f"{cache_root()}  ({cubins} cubins, {_mib(size)})"),
        ("extra flags", setting("MORI_JIT_EXTRA_FLAGS") or "(none)"),
    ]
    reason = driver.unavailable_reason()
    if reason is not None:
        rows.append(("GPU", f"not visible: {reason}"))
    else:
        major, minor = driver.driver_version()
        rows.append(("driver", f"supports CUDA {major}.{minor}"))
        for device in range(driver.device_count()):
            rows.append((f"GPU {device}", f"{driver.device_name(device)} ({driver.device_arch(device)})"))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        _write(f"{label:<{width}}  {value}")
    return 0


def _table(results: Sequence[PrecompileResult]) -> None:
    header = ("name", "arch", "status", "seconds", "package")
    rows = [(r.name, r.arch, r.status, f"{r.seconds:.2f}", r.entry_point) for r in results]
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        _write("  ".join(f"{cell:<{widths[i]}}" for i, cell in enumerate(row)).rstrip())


def _precompile(args: argparse.Namespace) -> int:
    kernels, problems = discover()
    for problem in problems:
        sys.stderr.write(f"mori-jit: {problem}\n")
    if not kernels:
        sys.stderr.write(f"mori-jit: no kernels are declared (entry point group {ENTRY_POINT_GROUP})\n")
        return 1 if problems else 0
    results = precompile(kernels, arch=args.arch, compiler=args.compiler, jobs=args.jobs, only=args.only)
    if not results:
        sys.stderr.write(f"mori-jit: no declared kernel matches --only {args.only!r}\n")
        return 1
    _table(results)
    failed = [result for result in results if result.status == "failed"]
    for result in failed:
        sys.stderr.write(f"\n{result.name} ({result.entry_point}) failed:\n{result.error}\n")
    return 1 if failed or problems else 0


def _clear_cache() -> int:
    root = cache_root()
    files, size = clear(root)
    _write(f"removed {files} files ({_mib(size)}) from {root}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mori-jit`` console script."""
    parser = argparse.ArgumentParser(prog="mori-jit", description="mori's CUDA kernel JIT")
    parser.add_argument("-v", "--verbose", action="store_true", help="log what the JIT does (INFO level)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="compiler, target arch, cache directory and GPU visibility")
    pre = sub.add_parser("precompile", help=f"compile every kernel declared in {ENTRY_POINT_GROUP} into the cache")
    pre.add_argument("--arch", help="target such as sm_90 (default: MORI_JIT_ARCH, then the GPU's, then sm_90)")
    pre.add_argument("--compiler", choices=("auto", "nvrtc", "nvcc"), help="default: MORI_JIT_COMPILER")
    pre.add_argument("--jobs", type=int, default=None, help="parallel compiles (default: CPU count, at most 8)")
    pre.add_argument("--only", metavar="PATTERN", help="only kernels whose name matches this glob")
    sub.add_parser("clear-cache", help="delete every cached kernel under the cache directory")
    args = parser.parse_args(argv)

    level = logging.INFO if args.verbose else getattr(logging, setting("MORI_LOG_LEVEL").upper(), logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "info":
            return _info()
        if args.command == "precompile":
            return _precompile(args)
        return _clear_cache()
    except MoriShmemError as exc:
        sys.stderr.write(f"mori-jit: {exc}\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
