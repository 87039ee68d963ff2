# SPDX-License-Identifier: MIT
"""One version per distribution, written once in its meson.build; metadata and __version__ follow it."""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from mori._version import UNKNOWN_VERSION, distribution_version

#: distribution -> the module whose ``__version__`` reports it.
MODULES = {
    "mori": "mori",
    "mori-shmem": "mori.shmem",
    "mori-ep": "mori.ep",
    "mori-cco": "mori.cco",
    "mori-ir": "mori.ir",
    "mori-viz": "mori.viz",
    "mori-io": "mori.io",
    "mori-umbp": "mori.umbp",
}

_PROJECT_VERSION = re.compile(r"project\(.*?version:\s*'([^']+)'", re.DOTALL)


def _package_dir(distribution: str) -> Path:
    return REPO / "packages" / distribution


def _meson_version(distribution: str) -> str:
    found = _PROJECT_VERSION.search((_package_dir(distribution) / "meson.build").read_text())
    assert found, f"{distribution}/meson.build: project() has no version"
    return found.group(1)


def test_every_package_dir_is_listed() -> None:
    on_disk = {p.name for p in (REPO / "packages").iterdir() if (p / "pyproject.toml").is_file()}
    assert on_disk == set(MODULES)


@pytest.mark.parametrize("distribution", sorted(MODULES))
def test_pyproject_takes_its_version_from_meson(distribution: str) -> None:
    # A regex, not tomllib: these tests also run on Python 3.10, which has no tomllib.
    text = (_package_dir(distribution) / "pyproject.toml").read_text()
    assert not re.search(r"^version\s*=", text, re.MULTILINE), "the version is written in meson.build only"
    assert re.search(r'^dynamic\s*=\s*\[[^]]*"version"', text, re.MULTILINE)


@pytest.mark.parametrize("distribution", sorted(MODULES))
def test_installed_version_is_meson_version(distribution: str) -> None:
    installed = importlib.metadata.version(distribution)
    assert installed == _meson_version(distribution)
    module = importlib.import_module(MODULES[distribution])
    assert module.__version__ == installed


def test_missing_metadata_gives_the_unknown_version() -> None:
    assert distribution_version("mori-not-a-distribution") == UNKNOWN_VERSION == "0+unknown"


def test_installed_pins_are_satisfied() -> None:
    """Every dependency pin between the installed wheels (mori-shmem==0.1.*, mori>=0.2.0,<0.3) holds."""
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("distribution", sorted(MODULES))
def test_changelog_has_an_entry_for_the_version(distribution: str) -> None:
    changelog = (_package_dir(distribution) / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^]]+)\]", changelog, re.MULTILINE)
    assert headings[0] == "Unreleased", "Keep a Changelog: the newest section first"
    assert _meson_version(distribution) in headings
