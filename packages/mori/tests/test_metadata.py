# SPDX-License-Identifier: MIT
"""Every installed wheel carries the MIT license file, its classifiers and one requires-python."""

from __future__ import annotations

import importlib.metadata

import pytest
from conftest import REPO
from test_versions import MODULES


@pytest.mark.parametrize("distribution", sorted(MODULES))
def test_wheel_carries_the_license(distribution: str) -> None:
    dist = importlib.metadata.distribution(distribution)
    assert dist.metadata["License-Expression"] == "MIT"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    shipped = [f for f in dist.files or [] if f.parts[-2:] == ("licenses", "LICENSE")]
    assert len(shipped) == 1, dist.files
    assert shipped[0].read_text() == (REPO / "LICENSE").read_text()


@pytest.mark.parametrize("distribution", sorted(MODULES))
def test_package_license_is_the_repository_license(distribution: str) -> None:
    assert (REPO / "packages" / distribution / "LICENSE").read_text() == (REPO / "LICENSE").read_text()


@pytest.mark.parametrize("distribution", sorted(MODULES))
def test_one_requires_python_and_classifiers(distribution: str) -> None:
    metadata = importlib.metadata.metadata(distribution)
    assert metadata["Requires-Python"] == ">=3.10"
    classifiers = metadata.get_all("Classifier") or []
    for minor in (10, 11, 12, 13):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
