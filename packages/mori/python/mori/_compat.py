# SPDX-License-Identifier: MIT
"""Settings accepted for compatibility with MORI that have no effect here, logged once each.

Every such setting has a row in docs/user-guide/compatibility.md saying why it has no effect; the
code that accepts it calls :func:`note_no_effect` when a program sets it to a non-default value.
"""

from __future__ import annotations

import logging
import threading

_log = logging.getLogger("mori.compat")
_noted: set[str] = set()
_lock = threading.Lock()


def note_no_effect(setting: str, value: object, reason: str) -> None:
    """Log, once per process and setting, that ``setting`` = ``value`` is accepted with no effect."""
    with _lock:
        if setting in _noted:
            return
        _noted.add(setting)
    _log.info("%s=%r is accepted for compatibility with MORI and has no effect: %s", setting, value, reason)


def noted_settings() -> frozenset[str]:
    """The settings logged so far in this process (for tests and `python -m mori env`)."""
    with _lock:
        return frozenset(_noted)
