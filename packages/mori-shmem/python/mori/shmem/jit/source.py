# SPDX-License-Identifier: MIT
"""Kernel sources: reading, specialising by ``#define``s, and fingerprinting their headers.

A specialisation is the source text with one ``#define NAME VALUE`` line per template constant
prepended, so the rendered text *is* the identity of the variant: there are no out-of-band
``-D`` options that a cache key could miss.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mori.shmem._sdk import get_include
from mori.shmem.errors import InvalidArgumentError

SourceLike = str | os.PathLike[str]
DefineValue = int | str | bool

# Files whose contents enter the cache key when they sit under an include directory. A kernel
# that includes a file with another suffix must name it in a header or rename it.
HEADER_SUFFIXES = frozenset({".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl"})
# A str ending in one of these (and with no newline) is a file name, not source text.
_SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def source_dir() -> Path:
    """The installed ``mori/shmem/device_src``: mori-shmem's own kernel sources."""
    return Path(__file__).resolve().parent.parent / "device_src"


def include_dir() -> Path:
    """mori-shmem's header directory (``mori.shmem.get_include()``) as a Path."""
    return Path(get_include())


@dataclass(frozen=True)
class RenderedSource:
    """One specialisation, ready to compile."""

    name: str
    text: str
    origin: Path | None  # the .cu file it was read from, None for inline text
    include_dirs: tuple[Path, ...]  # the origin's directory first, then the caller's


def _define_line(name: str, value: DefineValue) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise InvalidArgumentError(f"define name {name!r} is not a C identifier")
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        if "\n" in value or "\r" in value:
            raise InvalidArgumentError(f"define {name}={value!r} spans several lines")
        text = value
    else:
        raise InvalidArgumentError(
            f"define {name}={value!r} has type {type(value).__name__}; expected int, str or bool"
        )
    return f"#define {name} {text}".rstrip()


def render_defines(defines: Mapping[str, DefineValue]) -> str:
    """``#define`` lines, sorted by name so that equal mappings render (and hash) the same."""
    return "".join(_define_line(name, defines[name]) + "\n" for name in sorted(defines))


def _is_path(source: SourceLike) -> bool:
    if isinstance(source, os.PathLike):
        return True
    return "\n" not in source and source.rstrip().endswith(_SOURCE_SUFFIXES)


def resolve_include_dirs(include_dirs: Iterable[SourceLike]) -> tuple[Path, ...]:
    resolved: list[Path] = []
    for entry in include_dirs:
        path = Path(entry).expanduser().resolve()
        if not path.is_dir():
            raise InvalidArgumentError(f"include directory {str(entry)!r} does not exist")
        if path not in resolved:
            resolved.append(path)
    return tuple(resolved)


def render(
    source: SourceLike,
    *,
    name: str | None = None,
    defines: Mapping[str, DefineValue] | None = None,
    include_dirs: Iterable[SourceLike] = (),
) -> RenderedSource:
    """Reads ``source`` and prepends ``defines``.

    ``source`` is a file when it is a ``Path`` (any ``os.PathLike``) or a one-line ``str`` ending
    in ``.cu``/``.cuh``/``.cpp``/``.cc``/``.cxx``; any other ``str`` is CUDA C++ text. A file's
    directory is searched first for its ``#include "..."`` files, as a compiler would.
    """
    origin: Path | None = None
    if _is_path(source):
        origin = Path(source).expanduser().resolve()
        if not origin.is_file():
            raise InvalidArgumentError(f"kernel source {str(source)!r} does not exist")
        body = origin.read_text()
        label = origin.name
    else:
        body = str(source)
        label = f"{name or 'kernel'}.cu"
    kernel_name = name or (origin.stem if origin is not None else "kernel")
    if not _NAME.fullmatch(kernel_name):
        raise InvalidArgumentError(f"kernel name {kernel_name!r} may hold only letters, digits and _ . + -")
    dirs = resolve_include_dirs([*([origin.parent] if origin is not None else []), *include_dirs])
    # #line makes the compiler report positions in the original file; only its base name is used,
    # so the text (and the cache key) does not depend on where the package is installed.
    text = f'// rendered by mori.shmem.jit from {label}\n{render_defines(defines or {})}#line 1 "{label}"\n{body}'
    if not text.endswith("\n"):
        text += "\n"
    return RenderedSource(kernel_name, text, origin, dirs)


# ---------------------------------------------------------------------------------------------
# Header fingerprints

_file_digests: dict[tuple[str, int, int, int], str] = {}
_digest_lock = threading.Lock()


def _file_digest(path: Path) -> str:
    # Memoised on (path, inode, size, mtime) so that a process loading many kernels reads each
    # header once; an edited header changes its mtime and is read again.
    stat = path.stat()
    memo_key = (str(path), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _digest_lock:
        cached = _file_digests.get(memo_key)
    if cached is not None:
        return cached
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with _digest_lock:
        _file_digests[memo_key] = digest
    return digest


def header_files(include_dir: Path) -> list[tuple[str, Path]]:
    """(path relative to ``include_dir``, path) of every header under it, sorted."""
    found: list[tuple[str, Path]] = []
    for root, dirs, files in os.walk(include_dir):
        dirs.sort()
        for file_name in files:
            path = Path(root, file_name)
            if path.suffix in HEADER_SUFFIXES and path.is_file():
                found.append((path.relative_to(include_dir).as_posix(), path))
    found.sort()
    return found


def headers_digest(include_dirs: Sequence[Path]) -> str:
    """sha256 over the relative names and contents (never the absolute paths) of every header."""
    digest = hashlib.sha256()
    for index, include in enumerate(include_dirs):
        for relative, path in header_files(include):
            digest.update(f"{index}:{relative}:{_file_digest(path)}\n".encode())
    return digest.hexdigest()
