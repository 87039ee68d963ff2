# SPDX-License-Identifier: MIT
"""Where the device bitcode comes from: ``find_bitcode()``.

Search order, first hit wins: (1) ``MORI_SHMEM_BC``, a file you name; (2) the bitcode shipped in
the wheel (built with clang when the wheel was built); (3) the JIT cache (``MORI_JIT_CACHE_DIR``,
mori-shmem's), keyed by the content of the device sources, of mori-shmem's device headers and by
the clang that built it; (4) a build with clang into that cache, unless ``MORI_DISABLE_JIT`` is
set.

The bitcode is target-neutral NVPTX (see clang_toolchain): one file serves every GPU from sm_70
on, so unlike AMD code objects there is no per-architecture variant. There are two builds: the
full one, which reaches PEs on other hosts through mori-shmem's device proxy, and ``p2p``, built
without the proxy for jobs whose PEs are all load/store reachable, where the proxy's never-taken
branch costs about 0.3 us per put-with-signal round trip. ``find_bitcode()`` picks the one the
running job needs, as mori-shmem's JIT does.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from mori._compat import note_no_effect
from mori.ir import clang_toolchain
from mori.ir.errors import BitcodeBuildError, BitcodeNotFoundError
from mori.ir.settings import setting

__all__ = [
    "BITCODE_NAME",
    "COV_NO_EFFECT",
    "bitcode_cache_dir",
    "build_bitcode",
    "device_sources",
    "find_bitcode",
    "job_variant",
    "shipped_bitcode",
]

_log = logging.getLogger("mori.ir")

BITCODE_NAME = "libmori_shmem_device.bc"
_VARIANTS = {"full": (BITCODE_NAME, ()), "p2p": ("libmori_shmem_device_p2p.bc", ("MORI_SHMEM_DISABLE_DEVICE_PROXY",))}
_PACKAGE_DIR = Path(__file__).resolve().parent
_SOURCE = "mori_shmem_ir.cu"
_PRELUDE = "clang_cuda_prelude.h"
#: Why ``find_bitcode(cov=...)`` has no effect (the mori-ir row of docs/user-guide/compatibility.md).
COV_NO_EFFECT = (
    "it is the AMDGPU code-object version; the bitcode here is target-neutral NVPTX, which has no "
    "code-object versions, so one file serves every caller"
)
# Bumped when the build recipe changes in a way the inputs do not show.
_RECIPE_VERSION = "1"

_found: dict[str, str] = {}
_found_lock = threading.Lock()


def device_sources() -> Path:
    """The directory of the device library's sources: installed next to the package, or the
    source tree's src/device when running from a checkout."""
    for candidate in (_PACKAGE_DIR / "device_src", _PACKAGE_DIR.parents[2] / "src" / "device"):
        if (candidate / _SOURCE).is_file():
            return candidate
    raise BitcodeNotFoundError(f"mori-ir's device sources ({_SOURCE}) are missing from {_PACKAGE_DIR}: broken install")


def shipped_bitcode(variant: str = "full") -> Path | None:
    path = _PACKAGE_DIR / "lib" / _VARIANTS[variant][0]
    return path if path.is_file() else None


def job_variant() -> str:
    """``p2p`` when mori-shmem runs a job whose PEs are all load/store reachable, else ``full``."""
    import mori.shmem as shmem

    if not shmem.shmem_is_initialized():
        return "full"
    remote = any(shmem.shmem_pe_transport(pe) == "remote" for pe in range(shmem.shmem_npes()))
    return "full" if remote else "p2p"


def _check_variant(variant: str) -> str:
    if variant not in _VARIANTS:
        raise ValueError(f"variant={variant!r} is not one of {', '.join(_VARIANTS)}")
    return variant


def bitcode_cache_dir() -> Path:
    from mori.shmem.jit import cache_root

    return cache_root() / "ir"


def _shmem_include() -> Path:
    import mori.shmem

    return Path(mori.shmem.get_include())


def _cache_key(clang: clang_toolchain.Clang, variant: str) -> str:
    defines = ",".join(_VARIANTS[variant][1])
    digest = hashlib.sha256(f"{_RECIPE_VERSION}\0{clang.banner}\0{clang_toolchain.BUILD_ARCH}\0{defines}\0".encode())
    sources, include = device_sources(), _shmem_include()
    files = [(name, sources / name) for name in (_SOURCE, _PRELUDE)]
    files += [(str(p.relative_to(include)), p) for p in sorted(include.rglob("*")) if p.is_file()]
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _usable(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == clang_toolchain.BITCODE_MAGIC
    except OSError:
        return False


def _find_clang() -> clang_toolchain.Clang:
    clang, refused = clang_toolchain.find_clang(setting("MORI_IR_CLANG"))
    if clang is None:
        why = "; ".join(refused) or f"no clang-NN (NN >= {clang_toolchain.MIN_CLANG_MAJOR}) or clang on PATH"
        raise BitcodeNotFoundError(
            "mori-ir's device bitcode was not shipped with this wheel and cannot be built here: "
            f"{why}. Install clang {clang_toolchain.MIN_CLANG_MAJOR}+ (Debian/Ubuntu: apt install clang-19), "
            "point MORI_IR_CLANG at one, or set MORI_SHMEM_BC to a prebuilt libmori_shmem_device.bc "
            "(python -m mori.ir build --out FILE on a machine with clang)."
        )
    return clang


def _cached(clang: clang_toolchain.Clang, variant: str) -> Path:
    stem = _VARIANTS[variant][0].removesuffix(".bc")
    return bitcode_cache_dir() / f"{stem}-{_cache_key(clang, variant)[:16]}.bc"


def build_bitcode(out: Path | None = None, *, force: bool = False, variant: str = "full") -> Path:
    """Builds the bitcode (``variant`` ``full`` or ``p2p``) with clang into the cache (or ``out``)
    and returns its path.

    Concurrent builders of the same key wait for each other; the file appears whole or not at
    all. Raises ``BitcodeNotFoundError`` without a usable clang, ``BitcodeBuildError`` when clang
    fails.
    """
    _check_variant(variant)
    clang = _find_clang()
    target = out if out is not None else _cached(clang, variant)
    with _locked(target.parent / f".{target.name}.lock"):
        if not force and out is None and _usable(target):
            return target
        sources = device_sources()
        _log.info("building %s with %s", target, clang.describe())
        try:
            clang_toolchain.compile_bitcode(
                clang, sources / _SOURCE, sources / _PRELUDE, [_shmem_include()], target, defines=_VARIANTS[variant][1]
            )
        except RuntimeError as exc:
            raise BitcodeBuildError(f"building mori-ir's device bitcode failed:\n{exc}") from None
    return target


def _locate(variant: str = "full") -> Path:
    explicit = setting("MORI_SHMEM_BC")
    if explicit:
        path = Path(explicit).expanduser()
        if not _usable(path):
            raise BitcodeNotFoundError(f"MORI_SHMEM_BC={explicit!r} is not a readable LLVM bitcode file")
        return path
    shipped = shipped_bitcode(variant)
    if shipped is not None:
        return shipped
    if setting("MORI_DISABLE_JIT"):
        cached = _cached(_find_clang(), variant)
        if _usable(cached):
            return cached
        raise BitcodeNotFoundError(
            f"MORI_DISABLE_JIT is set and no bitcode is shipped or cached (looked for {cached}); "
            "set MORI_SHMEM_BC or unset MORI_DISABLE_JIT"
        )
    return build_bitcode(variant=variant)


def find_bitcode(variant: str | None = None, *, cov: int | None = None) -> str:
    """The path of the device bitcode (see the module doc for where it comes from).

    ``variant``: ``full`` (reaches remote PEs through the device proxy), ``p2p`` (load/store peers
    only), or None for the one the running job needs (:func:`job_variant`). ``cov``: MORI's AMDGPU
    code-object version, accepted with no effect (:data:`COV_NO_EFFECT`). Raises
    ``BitcodeNotFoundError`` (a ``FileNotFoundError``) saying what to install when there is none.
    Answers are remembered for the process.
    """
    if cov is not None:
        note_no_effect("find_bitcode(cov=...)", cov, COV_NO_EFFECT)
    chosen = _check_variant(variant) if variant is not None else job_variant()
    with _found_lock:
        if chosen not in _found:
            _found[chosen] = str(_locate(chosen))
            _log.debug("device bitcode (%s): %s", chosen, _found[chosen])
        return _found[chosen]


get_bitcode_path = find_bitcode
