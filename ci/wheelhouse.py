"""The shared wheelhouse: content hashes of package sources, so a wheel is rebuilt only when
something that goes into it changed. CI jobs and repeated nox sessions then share wheels.

A stamp ``wheelhouse/<dist>.<interp>.json`` sits beside each wheel and records the hash and the
wheel's file name. The hash covers the package's files (minus tests and build debris), the build
requirements, the interpreter tag, and the hashes of the packages it depends on (a dependent
compiles against its dependencies' SDK, so it must be rebuilt when they change).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from pkggraph import ROOT, Graph

WHEELHOUSE = ROOT / "wheelhouse"

# Not part of what a wheel is built from: tests are not installed, the rest is build debris.
_IGNORED_DIRS = frozenset({"tests", "build", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".so", ".whl")


#: The root distribution ``mori`` (packages/mori): pure Python that every mori-* wheel depends on at
#: run time, plus the header-only C++ that the native packages compile against (ROOT_HEADERS): only
#: a change to those headers rebuilds a dependent.
ROOT_PKG = "root"
ROOT_HEADERS = Path("python") / "mori" / "include"


def distribution(pkg: str) -> str:
    """The distribution name of a package: ``mori`` for the root, ``mori-<pkg>`` for the others."""
    return "mori" if pkg == ROOT_PKG else f"mori-{pkg}"


def package_dir(pkg: str) -> Path:
    return ROOT / "packages" / distribution(pkg)


def dist_name(pkg: str) -> str:
    """The wheel file name prefix of a package (PEP 427 escapes '-' to '_')."""
    return distribution(pkg).replace("-", "_")


def interp_tag() -> str:
    """Wheels are per interpreter (this host runs 3.11, the GPU host 3.12), so stamps are too."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _source_files(directory: Path) -> Iterable[Path]:
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if any(part in _IGNORED_DIRS or part.startswith(".mesonpy") for part in rel.parts[:-1]):
            continue
        if path.is_file() and not path.name.endswith(_IGNORED_SUFFIXES):
            yield path


def source_hash(pkgs: Graph, pkg: str, build_reqs: Iterable[str]) -> str:
    """Content hash of everything ``pkg``'s wheel is built from, dependencies included."""
    h = hashlib.sha256()
    h.update(f"{interp_tag()}\n{sorted(build_reqs)}\n".encode())
    for dep in pkgs[pkg]:
        if dep == ROOT_PKG:
            headers = package_dir(ROOT_PKG) / ROOT_HEADERS
            for path in sorted(p for p in headers.rglob("*") if p.is_file()):
                h.update(f"root header {path.relative_to(headers).as_posix()}\n".encode())
                h.update(hashlib.sha256(path.read_bytes()).digest())
            continue
        h.update(f"dep {dep} {source_hash(pkgs, dep, build_reqs)}\n".encode())
    directory = package_dir(pkg)
    for path in _source_files(directory):
        h.update(f"file {path.relative_to(directory).as_posix()}\n".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def _stamp(pkg: str) -> Path:
    return WHEELHOUSE / f"{dist_name(pkg)}.{interp_tag()}.json"


def up_to_date(pkg: str, digest: str) -> bool:
    """True when the stamp records ``digest`` and its wheel is still there."""
    try:
        stamp = json.loads(_stamp(pkg).read_text())
    except (OSError, ValueError):
        return False
    return bool(stamp.get("hash") == digest and (WHEELHOUSE / str(stamp.get("wheel"))).is_file())


def wheel_path(pkg: str) -> Path:
    """The wheel the last build of ``pkg`` recorded for this interpreter."""
    try:
        return WHEELHOUSE / str(json.loads(_stamp(pkg).read_text())["wheel"])
    except (OSError, ValueError, KeyError) as exc:
        raise FileNotFoundError(f"no {distribution(pkg)} wheel for {interp_tag()}; run `nox -s build-{pkg}`") from exc


def remove_wheels(pkg: str) -> None:
    """Drop earlier wheels of ``pkg`` that this interpreter could install, so only one remains."""
    for old in WHEELHOUSE.glob(f"{dist_name(pkg)}-*.whl"):
        if f"-{interp_tag()}-" in old.name or old.name.endswith("-py3-none-any.whl"):
            old.unlink()


def record(pkg: str, digest: str) -> Path:
    """Write the stamp for the wheel just built; exactly one matching wheel must exist."""
    wheels = [
        w
        for w in WHEELHOUSE.glob(f"{dist_name(pkg)}-*.whl")
        if f"-{interp_tag()}-" in w.name or w.name.endswith("-py3-none-any.whl")
    ]
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel of mori-{pkg} in {WHEELHOUSE}, found {[w.name for w in wheels]}")
    _stamp(pkg).write_text(json.dumps({"hash": digest, "wheel": wheels[0].name}, indent=2) + "\n")
    return wheels[0]
