# SPDX-License-Identifier: MIT
"""MORI's UMBP config enums (``mori.cpp`` / ``mori.umbp`` names and values)."""

from __future__ import annotations

import enum


class UMBPDeploymentMode(enum.IntEnum):
    Local = 0
    StandaloneProcess = 1
    Distributed = 2


class UMBPRole(enum.IntEnum):
    """The local mode's role on a shared SSD (MORI's leader/follower)."""

    Standalone = 0
    SharedSSDLeader = 1
    SharedSSDFollower = 2


class UMBPSsdLayoutMode(enum.IntEnum):
    SegmentedLog = 0


class UMBPIoBackend(enum.IntEnum):
    Posix = 0
    IoUring = 1


class UMBPDurabilityMode(enum.IntEnum):
    Strict = 0
    Relaxed = 1


class CacheRemoteAdmission(enum.IntEnum):
    """Which remote hits a distributed node would re-cache locally (``cache_remote_fetches``)."""

    SIZE = 0
    NEVER = 1
    ALWAYS = 2
