"""What a release artifact must satisfy, read from the files themselves (no install needed).

Each check returns a list of problems, empty when the artifact is fine, so a caller can report all
of them at once. The version is the one written in the package's meson.build (the only place).
"""

from __future__ import annotations

import email.message
import email.parser
import re
import tarfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pkggraph import ROOT
from wheelhouse import distribution, package_dir

#: Every package supports these; the classifiers must say so (requires-python is ">=3.10").
PYTHON_MINORS = (10, 11, 12, 13)
REQUIRES_PYTHON = ">=3.10"

#: The oldest torch the packages support: every `torch` requirement a wheel declares floors here,
#: and `nox -s test-oldest-torch` (run by CI) tests it (torch 2.8 brought float4_e2m1fn_x2, the
#: dtype mori-ep's fp4 payloads are viewed as).
OLDEST_TORCH = "2.8.0"
_TORCH_REQUIREMENT = re.compile(r"^torch\b(?P<spec>[^;]*)")

#: mori-shmem's runtime library: only mori-shmem's own wheel may carry it (one copy per process).
SHMEM_LIBRARY = "libmori_shmem.so"
SHMEM_LIBRARY_HOME = "mori/shmem/lib/"

#: Never vendored into a dependent's wheel (``auditwheel repair --exclude``): mori-shmem's copy is
#: the one every package loads (two copies would be two symmetric heaps), and the CUDA driver is the
#: machine's (loaded lazily anyway). ``auditwheel show`` lists them as external libraries.
EXCLUDED_LIBS: tuple[str, ...] = (SHMEM_LIBRARY, "libcuda.so.1")

PROJECT_VERSION = re.compile(r"project\(.*?version:\s*'([^']+)'", re.DOTALL)
_CHANGELOG_SECTION = re.compile(r"^## \[([^]]+)\]", re.MULTILINE)
_MANYLINUX = re.compile(r"manylinux_\d+_\d+_x86_64")


def meson_version(pkg: str) -> str:
    """The version in ``project(version:)`` of the package's meson.build."""
    found = PROJECT_VERSION.search((package_dir(pkg) / "meson.build").read_text())
    if not found:
        raise ValueError(f"{distribution(pkg)}/meson.build: project() has no version")
    return found.group(1)


def changelog_sections(pkg: str, repo: Path = ROOT) -> list[str]:
    """The ``## [x]`` headings of the package's CHANGELOG.md, newest first."""
    return _CHANGELOG_SECTION.findall((repo / "packages" / distribution(pkg) / "CHANGELOG.md").read_text())


def check_changelog(pkg: str, version: str) -> list[str]:
    if version not in changelog_sections(pkg):
        return [f"{distribution(pkg)}/CHANGELOG.md has no '## [{version}]' section for the version in meson.build"]
    return []


_PIN = re.compile(r'"(mori(?:-[a-z]+)?)(==|>=)([^",<]+)(?:,<([^"]+))?"')


def release_series(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def check_pins(pkg: str, pyproject: str | None = None) -> list[str]:
    """Every pin of a mori distribution in the package's pyproject.toml names the series that
    distribution is at now: ``mori-shmem==X.Y.*`` (build and run; an ABI bump starts a new series,
    so it forces the dependents' pins and releases), ``mori-io==X.Y.*``, or the floored form
    ``mori>=X.Y.Z,<X.(Y+1)`` (any of them) with Z at most that distribution's current patch: a
    package may need what a patch release added, such as the root's shared headers of 0.2.1 or
    mori-shmem's device conversions of 0.1.5."""
    text = pyproject if pyproject is not None else (package_dir(pkg) / "pyproject.toml").read_text()
    problems = []
    for dist, op, low, high in _PIN.findall(text):
        dep = "root" if dist == "mori" else dist.removeprefix("mori-")
        current = meson_version(dep)
        major, minor = release_series(current)
        got = f"{dist}{op}{low}" + (f",<{high}" if high else "")
        if op == "==":
            expected = f"{dist}=={major}.{minor}.*"
            ok = got == expected
        else:
            expected = f"{dist}>={major}.{minor}.Z,<{major}.{minor + 1} (Z <= {current.split('.')[2]})"
            floor = low.split(".")
            ok = (
                high == f"{major}.{minor + 1}"
                and len(floor) == 3
                and release_series(low) == (major, minor)
                and floor[2].isdigit()
                and int(floor[2]) <= int(current.split(".")[2])
            )
        if not ok:
            problems.append(
                f"{distribution(pkg)}/pyproject.toml pins {got!r}, but {dist} is at {current}: "
                f"pin {expected!r} (and release {distribution(pkg)} with it)"
            )
    return problems


def _parse_metadata(text: str) -> email.message.Message:
    return email.parser.Parser().parsestr(text)


def wheel_metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return _parse_metadata(zf.read(name).decode())


def _check_metadata(meta: email.message.Message, dist: str, version: str, what: str) -> list[str]:
    problems = []
    if meta["Name"] != dist:
        problems.append(f"{what}: Name is {meta['Name']!r}, expected {dist!r}")
    if meta["Version"] != version:
        problems.append(f"{what}: Version is {meta['Version']!r}, meson.build says {version!r}")
    if meta["Requires-Python"] != REQUIRES_PYTHON:
        problems.append(f"{what}: Requires-Python is {meta['Requires-Python']!r}, expected {REQUIRES_PYTHON!r}")
    if meta["License-Expression"] != "MIT" or meta.get_all("License-File") != ["LICENSE"]:
        problems.append(f"{what}: License-Expression/License-File are not MIT/LICENSE")
    for requirement in meta.get_all("Requires-Dist") or []:
        torch = _TORCH_REQUIREMENT.match(requirement)
        if torch and torch["spec"].strip() != f">={OLDEST_TORCH}":
            problems.append(
                f"{what}: requires {requirement!r}; a torch requirement must read 'torch>={OLDEST_TORCH}' "
                "(the oldest torch CI tests, OLDEST_TORCH in ci/release_checks.py)"
            )
    classifiers = meta.get_all("Classifier") or []
    for minor in PYTHON_MINORS:
        if f"Programming Language :: Python :: 3.{minor}" not in classifiers:
            problems.append(f"{what}: no classifier for Python 3.{minor}")
    return problems


def check_wheel(wheel: Path, pkg: str, version: str, *, repaired: bool) -> list[str]:
    """Metadata, license, platform tag and vendoring of one wheel file.

    ``repaired``: the wheel went through auditwheel, so a native wheel must carry a manylinux tag
    (the wheelhouse's development wheels are ``linux_x86_64``).
    """
    dist = distribution(pkg)
    what = wheel.name
    problems = _check_metadata(wheel_metadata(wheel), dist, version, what)
    if not wheel.name.startswith(f"{dist.replace('-', '_')}-{version}-"):
        problems.append(f"{what}: the file name does not start with {dist.replace('-', '_')}-{version}-")
    platform = wheel.name.removesuffix(".whl").split("-")[-1]
    if repaired and platform != "any" and not _MANYLINUX.fullmatch(platform):
        problems.append(f"{what}: platform tag {platform!r} is not manylinux (auditwheel repair missing?)")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        licenses = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        if len(licenses) != 1 or zf.read(licenses[0]) != (ROOT / "LICENSE").read_bytes():
            problems.append(f"{what}: .dist-info/licenses/LICENSE is missing or differs from the repository's")
    shmem_copies = [n for n in names if n.rsplit("/", 1)[-1] == SHMEM_LIBRARY]
    allowed = [f"{SHMEM_LIBRARY_HOME}{SHMEM_LIBRARY}"] if pkg == "shmem" else []
    if shmem_copies != allowed:
        problems.append(f"{what}: carries {shmem_copies} of {SHMEM_LIBRARY}, expected {allowed} (never vendored)")
    grafted = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".libs")})
    if grafted:
        problems.append(f"{what}: auditwheel grafted libraries into {grafted}; mori wheels need none")
    return problems


def check_sdist(sdist: Path, pkg: str, version: str) -> list[str]:
    """The sdist's PKG-INFO, and that it carries what a source build and a user need."""
    dist = distribution(pkg)
    top = f"{dist.replace('-', '_')}-{version}"
    what = sdist.name
    if sdist.name != f"{top}.tar.gz":
        return [f"{what}: expected {top}.tar.gz"]
    with tarfile.open(sdist) as tf:
        names = set(tf.getnames())
        pkg_info = tf.extractfile(f"{top}/PKG-INFO")
        problems = (
            [] if pkg_info is None else _check_metadata(_parse_metadata(pkg_info.read().decode()), dist, version, what)
        )
    for needed in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "meson.build"):
        if f"{top}/{needed}" not in names:
            problems.append(f"{what}: {needed} is missing")
    return problems


def check_audit(report: Mapping[str, Any], wheel: str) -> list[str]:
    """``auditwheel show --json``'s report on a repaired wheel: the manylinux policy its symbol
    versions allow is the one its file name carries, and it needs no library beyond the policy's
    except the deliberately excluded ones (for those the overall tag reads linux_x86_64)."""
    symbols_tag = str(report.get("sym_tag"))
    problems = []
    if not _MANYLINUX.fullmatch(symbols_tag) or not wheel.endswith(f"-{symbols_tag}.whl"):
        problems.append(
            f"{wheel}: auditwheel show gives the policy {symbols_tag!r}, which the file name does not carry"
        )
    external = sorted(set(report.get("external_libs") or {}) - set(EXCLUDED_LIBS))
    if external:
        problems.append(f"{wheel}: needs libraries outside the manylinux policy: {external}")
    if not report.get("external_libs") and report.get("overall_tag") != symbols_tag:
        problems.append(f"{wheel}: auditwheel show's overall tag {report.get('overall_tag')!r} is not {symbols_tag!r}")
    return problems
