# SPDX-License-Identifier: MIT
"""MORI's UMBP config enums (``mori.cpp`` / ``mori.umbp`` names and values)."""

from __future__ import annotations

import enum


class UMBPDeploymentMode(enum.IntEnum):
    Local = 0
    StandaloneProcess = 1
    Distributed = 2


class UMBPRole(enum.IntEnum):
    """The local mode's role on a shared SSD directory (MORI's leader/follower): the leader writes
    every block it stores through to ``ssd.storage_dir``; a follower stores nothing and reads the
    leader's blocks from there."""

    Standalone = 0
    SharedSSDLeader = 1
    SharedSSDFollower = 2


class UMBPSsdLayoutMode(enum.IntEnum):
    SegmentedLog = 0


class UMBPIoBackend(enum.IntEnum):
    """``PThread`` is the name older MORI releases (and the SGLang UMBPStore written for them) use
    for ``Posix``: an alias of the same member."""

    Posix = 0
    IoUring = 1
    PThread = 0


class UMBPDurabilityMode(enum.IntEnum):
    Strict = 0
    Relaxed = 1


class CacheRemoteAdmission(enum.IntEnum):
    """Which remote hits a distributed node would re-cache locally (``cache_remote_fetches``)."""

    SIZE = 0
    NEVER = 1
    ALWAYS = 2
