"""release-check's gate, in scratch git repositories: a package changed since its last tag is
refused until its version is bumped and the changelog has a section for it; a mori-shmem ABI bump
needs a new minor series; the repository itself passes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pkggraph import load_pkgs
from release_gate import abi_bump_without_new_series, last_tag, release_problems, unreleased_change


def _git(repo: Path, *args: str) -> None:
    identity = ["-c", "user.name=release test", "-c", "user.email=release@test.invalid"]
    subprocess.run(["git", *identity, *args], cwd=repo, check=True, capture_output=True)


def _package(repo: Path, dist: str, version: str, changelog: str, extra: str = "") -> None:
    folder = repo / "packages" / dist
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meson.build").write_text(f"project('{dist}', 'cpp', version: '{version}')\n{extra}")
    (folder / "CHANGELOG.md").write_text(changelog)


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", message)


def test_a_change_since_the_last_tag_needs_a_bump_and_a_changelog_section(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    _package(tmp_path, "mori-io", "0.2.0", "## [Unreleased]\n\n## [0.2.0]\n")
    _commit(tmp_path, "mori-io 0.2.0")
    assert unreleased_change("io", tmp_path) == []  # never tagged: nothing to compare with
    _git(tmp_path, "tag", "mori-io/v0.1.0")
    _git(tmp_path, "tag", "mori-io/v0.2.0")
    assert last_tag("io", tmp_path) == ("mori-io/v0.2.0", "0.2.0")
    assert unreleased_change("io", tmp_path) == []

    (tmp_path / "packages/mori-io/engine.cpp").write_text("// a change, not yet committed\n")
    problems = unreleased_change("io", tmp_path)
    assert problems and "changed since mori-io/v0.2.0" in problems[0] and "0.2.0" in problems[0]

    _package(tmp_path, "mori-io", "0.2.1", "## [Unreleased]\n\n## [0.2.0]\n")
    assert unreleased_change("io", tmp_path) == [
        "packages/mori-io is at 0.2.1 but CHANGELOG.md has no '## [0.2.1]' section"
    ]
    _package(tmp_path, "mori-io", "0.2.1", "## [Unreleased]\n\n## [0.2.1]\n\n## [0.2.0]\n")
    assert unreleased_change("io", tmp_path) == []


def test_an_abi_bump_needs_a_new_minor_series(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    options = tmp_path / "packages/mori-shmem/meson.options"
    _package(tmp_path, "mori-shmem", "0.1.1", "## [0.1.1]\n")
    options.write_text("option('abi_version', type: 'integer', value: 3, description: 'x')\n")
    _commit(tmp_path, "mori-shmem 0.1.1")
    _git(tmp_path, "tag", "mori-shmem/v0.1.1")

    options.write_text("option('abi_version', type: 'integer', value: 4, description: 'x')\n")
    _package(tmp_path, "mori-shmem", "0.1.2", "## [0.1.2]\n")
    problems = abi_bump_without_new_series(tmp_path)
    assert problems and "from 3 to 4" in problems[0] and "new minor series" in problems[0]

    _package(tmp_path, "mori-shmem", "0.2.0", "## [0.2.0]\n")
    assert abi_bump_without_new_series(tmp_path) == []


def test_the_repository_passes_its_own_gate() -> None:
    assert release_problems(load_pkgs()) == []
