# SPDX-License-Identifier: MIT
"""The one error root of the mori family.

Every package's own root (``MoriShmemError``, ``MoriIoError``, ``EpError``, ...) derives from
:class:`MoriError` and keeps its builtin bases, so ``except mori.errors.MoriError`` catches any mori
failure while ``except ValueError`` and the package's own classes keep working.
"""

from __future__ import annotations


class MoriError(Exception):
    """Base class of every error a mori package raises."""


class SettingError(MoriError, ValueError):
    """A setting (an environment variable or an ``override()`` value) is invalid or unknown; the
    message names the variable, the value and the limit it broke. Each package's config error
    (``mori.io.ConfigError``, ``mori.ep.EpConfigError``, ...) derives from it."""


__all__ = ["MoriError", "SettingError"]
