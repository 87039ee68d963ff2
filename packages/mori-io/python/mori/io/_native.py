# SPDX-License-Identifier: MIT
"""Loads the compiled core and wires its errors and log level to the Python side."""

from __future__ import annotations

import logging

from mori._logging import effective_level
from mori.io import _C as _C  # re-exported
from mori.io.errors import NATIVE_CODES

_C.set_error_classes(dict(NATIVE_CODES))


def apply_log_level() -> None:
    """Sets the native log threshold and the ``mori.io`` logger from MORI_LOG_LEVEL, else from
    MORI's MORI_GLOBAL_LOG_LEVEL (both declared once, in mori.settings.shared), else WARNING."""
    level = effective_level()
    _C.set_log_level(level)
    logging.getLogger("mori.io").setLevel(level)


def set_log_level(level: str) -> None:
    """MORI's ``set_log_level``: 'debug', 'info', 'warning', 'error' or 'critical'."""
    from mori.io.errors import InvalidArgumentError

    if not isinstance(level, str) or level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise InvalidArgumentError(f"level={level!r} must be one of debug, info, warning, error, critical")
    name = level.upper()
    _C.set_log_level(logging.getLevelName(name))
    logging.getLogger("mori.io").setLevel(name)


__all__ = ["_C", "apply_log_level", "set_log_level"]
