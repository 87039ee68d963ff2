# SPDX-License-Identifier: MIT
"""The level of the ``mori`` logger from MORI_LOG_LEVEL or MORI's MORI_GLOBAL_LOG_LEVEL.

Both are declared once, in :mod:`mori.settings.shared`. Every package logs under ``mori.<package>``,
so one level on ``mori`` reaches them all; a package's own variable (MORI_UMBP_LOG_LEVEL, ...)
still sets its logger below this one.
"""

from __future__ import annotations

import logging

from mori.errors import SettingError
from mori.settings import shared

#: MORI's spdlog level names, and ours, to logging levels.
_LEVELS: dict[str, int] = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "WARNING": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
    "OFF": logging.CRITICAL + 10,
}

_VARIABLES = ("MORI_LOG_LEVEL", "MORI_GLOBAL_LOG_LEVEL")


class LogLevelError(SettingError):
    """A log-level variable holds a name that is not a level."""


def parse_level(variable: str, text: str) -> int:
    try:
        return _LEVELS[text.strip().upper()]
    except KeyError:
        raise LogLevelError(f"{variable}={text!r} is not a log level; expected one of {', '.join(_LEVELS)}") from None


def level_from_environment() -> int | None:
    """The level MORI_LOG_LEVEL (first) or MORI_GLOBAL_LOG_LEVEL asks for (environment or
    ``mori.settings.override``), or None when neither is set."""
    for variable in _VARIABLES:
        if shared.is_set(variable):
            return parse_level(variable, shared.REGISTRY.text(variable))
    return None


def effective_level() -> int:
    """The level asked for, else the registry's default (WARNING)."""
    level = level_from_environment()
    return _LEVELS[str(shared.get("MORI_LOG_LEVEL"))] if level is None else level


def configure() -> None:
    """Set the ``mori`` logger's level from the environment, when a variable asks for one."""
    level = level_from_environment()
    if level is not None:
        logging.getLogger("mori").setLevel(level)
