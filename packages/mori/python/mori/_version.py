# SPDX-License-Identifier: MIT
"""Each distribution's version, read from its installed metadata.

The version is written once, in the package's ``meson.build`` ``project(version:)``; meson-python
copies it into the wheel's metadata (``dynamic = ["version"]`` in pyproject.toml), and every
``__version__`` reads it back from there, so the three can never disagree.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

# PEP 440-valid, sorts below every release, and says plainly where it came from.
UNKNOWN_VERSION = "0+unknown"


def distribution_version(distribution: str) -> str:
    """The installed version of ``distribution`` (e.g. ``"mori-io"``).

    Without metadata (sources put on ``sys.path`` by hand, never installed) there is no version to
    report: that gives :data:`UNKNOWN_VERSION` rather than a made-up release number.
    """
    try:
        return version(distribution)
    except PackageNotFoundError:
        return UNKNOWN_VERSION
