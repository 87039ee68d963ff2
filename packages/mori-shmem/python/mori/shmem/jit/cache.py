# SPDX-License-Identifier: MIT
"""The on-disk cache of compiled kernels, safe for many processes at once.

Layout: ``<root>/<arch>/<name>-<key[:16]>.cubin`` with, beside it, the rendered ``.cu`` (what
was compiled, for error messages and humans), a ``.json`` sidecar (options, compiler) and a
``.lock`` file. When 8 PEs start together and want the same new kernel, one takes the lock and
compiles, the others wait on the lock and then find the cubin: the compiler runs once. A cubin
appears only complete (written to a temporary file in the same directory, fsynced, renamed), and
one that is not an ELF file (a zero-byte leftover, a truncated copy) is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mori.shmem.jit.compiler import Compiler
from mori.shmem.jit.errors import JitCompileError
from mori.shmem.jit.source import RenderedSource, headers_digest
from mori.shmem.settings import setting

_log = logging.getLogger("mori.shmem.jit")

# Bumped when the key's recipe changes, so old entries are never mistaken for new ones.
KEY_FORMAT = "mori-jit-1"
_ELF_MAGIC = b"\x7fELF"
_ELF64_HEADER_BYTES = 64
# Files clear() may delete: only what this module writes, never anything else in the directory.
_CACHE_SUFFIXES = (".cubin", ".json", ".cu", ".lock", ".tmp")


def cache_root() -> Path:
    """MORI_JIT_CACHE_DIR, or ``~/.cache/mori/jit`` when it is empty."""
    configured = setting("MORI_JIT_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "mori" / "jit"


def kernel_key(*, text: str, headers: str, compiler: str, options: Sequence[str], arch: str) -> str:
    """sha256 over everything that decides the cubin's bytes, each field length-prefixed."""
    digest = hashlib.sha256()
    fields = (
        ("format", KEY_FORMAT),
        ("source", text),
        ("headers", headers),
        ("compiler", compiler),
        ("options", "\0".join(options)),
        ("arch", arch),
    )
    for label, value in fields:
        data = value.encode()
        digest.update(f"{label}:{len(data)}:".encode())
        digest.update(data)
    return digest.hexdigest()


def is_valid_cubin(path: Path) -> bool:
    """Whether ``path`` holds something that can be a cubin (an ELF file past its header)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_ELF64_HEADER_BYTES)
    except FileNotFoundError:
        return False
    return len(head) == _ELF64_HEADER_BYTES and head.startswith(_ELF_MAGIC)


@dataclass(frozen=True)
class Request:
    """One kernel to build: the rendered text plus everything else that enters its key."""

    source: RenderedSource
    compiler: Compiler
    options: tuple[str, ...]  # without include directories: their headers enter the key by content
    arch: str

    def key(self) -> str:
        return kernel_key(
            text=self.source.text,
            headers=headers_digest(self.source.include_dirs),
            compiler=self.compiler.identity,
            options=self.options,
            arch=self.arch,
        )


@dataclass(frozen=True)
class BuildResult:
    path: Path
    key: str
    compiled: bool  # False: the cubin was already cached (by this or another process)
    seconds: float  # time spent compiling, waiting for the lock included


def entry_path(root: Path, arch: str, name: str, key: str) -> Path:
    return root / arch / f"{name}-{key[:16]}.cubin"


@contextlib.contextmanager
def _locked(lock_path: Path, what: str) -> Iterator[None]:
    with lock_path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log.info("waiting for another process compiling %s", what)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _publish(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` so that readers see either nothing or all of it."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates 0600; cache entries are readable like any other file (umask aside).
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def build(request: Request, *, key: str | None = None, force: bool = False) -> BuildResult:
    """The cached cubin of ``request``, compiling it first if needed (or always, with ``force``)."""
    key = key or request.key()
    name, arch = request.source.name, request.arch
    path = entry_path(cache_root(), arch, name, key)
    if not force and is_valid_cubin(path):
        _log.debug("cache hit: %s", path)
        return BuildResult(path, key, False, 0.0)
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_suffix(".lock"), f"{name} for {arch}"):
        # Another process may have finished while this one waited for the lock.
        if not force and is_valid_cubin(path):
            return BuildResult(path, key, False, time.monotonic() - started)
        if path.exists():
            _log.warning("rebuilding %s: the cached file is not a valid cubin", path)
        source_path = path.with_suffix(".cu")
        _publish(source_path, request.source.text.encode())
        cubin = request.compiler.compile(
            request.source.text,
            source_path=source_path,
            arch=arch,
            options=request.options,
            include_dirs=request.source.include_dirs,
        )
        if not cubin.startswith(_ELF_MAGIC):
            raise JitCompileError(
                f"{request.compiler.describe()} returned {len(cubin)} bytes that are not a cubin for {source_path}",
                log="",
                compiler=request.compiler.describe(),
                options=request.options,
                source_path=source_path,
            )
        _publish(path, cubin)
        seconds = time.monotonic() - started
        sidecar = {
            "name": name,
            "key": key,
            "arch": arch,
            "compiler": request.compiler.describe(),
            "compiler_identity": request.compiler.identity,
            "options": list(request.options),
            "include_dirs": [str(directory) for directory in request.source.include_dirs],
            "source": str(request.source.origin) if request.source.origin else None,
            "compile_seconds": round(seconds, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _publish(path.with_suffix(".json"), (json.dumps(sidecar, indent=2) + "\n").encode())
    _log.info("compiled %s for %s with %s in %.2f s: %s", name, arch, request.compiler.kind, seconds, path)
    return BuildResult(path, key, True, seconds)


def cache_usage(root: Path | None = None) -> tuple[int, int]:
    """(number of cubins, total bytes of cache files) under ``root``."""
    root = root or cache_root()
    cubins = total = 0
    for path in _cache_files(root):
        total += path.stat().st_size
        cubins += path.suffix == ".cubin"
    return cubins, total


def _cache_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        return
    for arch_dir in sorted(root.iterdir()):
        if arch_dir.is_dir() and arch_dir.name.startswith("sm_"):
            for path in sorted(arch_dir.iterdir()):
                if path.is_file() and path.name.endswith(_CACHE_SUFFIXES):
                    yield path


def clear(root: Path | None = None) -> tuple[int, int]:
    """Deletes the cache's files (and nothing else) under ``root``; returns (files, bytes) removed."""
    root = root or cache_root()
    files = removed = 0
    for path in list(_cache_files(root)):
        size = path.stat().st_size
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            files += 1
            removed += size
    if root.is_dir():
        for arch_dir in root.iterdir():
            if arch_dir.is_dir() and arch_dir.name.startswith("sm_"):
                with contextlib.suppress(OSError):
                    arch_dir.rmdir()  # only when empty
    return files, removed
