"""Whether the tree may be released as it stands: every package that changed since its last release
tag carries a new version and a changelog section for it, every pin on another mori distribution
names that distribution's current series, and a mori-shmem ABI bump since its last tag starts a new
minor series (which the pin check then carries to the dependents).

``nox -s release-check`` runs :func:`release_problems`; CI runs that session on every change, so a
change that would need a release without one fails before it lands.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from pkggraph import ROOT
from release_checks import PROJECT_VERSION, changelog_sections, check_changelog, check_pins, release_series
from wheelhouse import distribution

_ABI_VERSION = re.compile(r"option\('abi_version'.*?value:\s*(\d+)", re.DOTALL)
_SHMEM_OPTIONS = "packages/mori-shmem/meson.options"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def last_tag(pkg: str, repo: Path = ROOT) -> tuple[str, str] | None:
    """The newest release tag of ``pkg`` and its version, e.g. ``("mori-ep/v0.2.0", "0.2.0")``."""
    prefix = f"{distribution(pkg)}/v"
    tags = _git(repo, "tag", "--list", f"{prefix}*").stdout.split()
    versions = [(tag, tag.removeprefix(prefix)) for tag in tags if re.fullmatch(r"\d+\.\d+\.\d+", tag[len(prefix) :])]
    return max(versions, key=lambda tv: _version_key(tv[1]), default=None)


def _file_at(repo: Path, rev: str | None, path: str) -> str:
    if rev is None:
        return (repo / path).read_text()
    shown = _git(repo, "show", f"{rev}:{path}")
    return shown.stdout if shown.returncode == 0 else ""


def version_at(pkg: str, repo: Path = ROOT, rev: str | None = None) -> str:
    """The version in the package's meson.build, in the working tree or at ``rev``."""
    found = PROJECT_VERSION.search(_file_at(repo, rev, f"packages/{distribution(pkg)}/meson.build"))
    if not found:
        raise ValueError(f"{distribution(pkg)}/meson.build has no project() version at {rev or 'the working tree'}")
    return found.group(1)


def unreleased_change(pkg: str, repo: Path = ROOT) -> list[str]:
    """A package whose files differ from its last tag (working tree included) needs a version above
    the tag's and a changelog section for it."""
    tagged = last_tag(pkg, repo)
    if tagged is None:
        return []
    tag, tag_version = tagged
    rel = f"packages/{distribution(pkg)}"
    untracked = _git(repo, "ls-files", "--others", "--exclude-standard", "--", rel).stdout.strip()
    if _git(repo, "diff", "--quiet", tag, "--", rel).returncode == 0 and not untracked:
        return []
    version = version_at(pkg, repo)
    if _version_key(version) <= _version_key(tag_version):
        return [f"{rel} changed since {tag} but meson.build still says {version}: bump the version"]
    if version not in changelog_sections(pkg, repo):
        return [f"{rel} is at {version} but CHANGELOG.md has no '## [{version}]' section"]
    return []


def abi_bump_without_new_series(repo: Path = ROOT) -> list[str]:
    """A mori-shmem ABI bump since its last tag must come with a new minor series: dependents pin
    ``mori-shmem==X.Y.*``, so only a new series makes them move (and be released) with it."""
    tagged = last_tag("shmem", repo)
    if tagged is None:
        return []
    tag, tag_version = tagged
    before = _ABI_VERSION.search(_file_at(repo, tag, _SHMEM_OPTIONS))
    now = _ABI_VERSION.search(_file_at(repo, None, _SHMEM_OPTIONS))
    if before is None or now is None or before.group(1) == now.group(1):
        return []
    version = version_at("shmem", repo)
    if release_series(version) == release_series(tag_version):
        return [
            f"mori-shmem's abi_version went from {before.group(1)} to {now.group(1)} since {tag}, but its "
            f"version {version} stays in the {tag_version.rsplit('.', 1)[0]} series: start a new minor series"
        ]
    return []


def release_problems(pkgs: Iterable[str]) -> list[str]:
    """Everything above for this repository, plus each package's changelog section for its current
    version and its pins on other mori distributions."""
    problems = abi_bump_without_new_series()
    for pkg in pkgs:
        problems += unreleased_change(pkg) + check_changelog(pkg, version_at(pkg)) + check_pins(pkg)
    return problems
