# SPDX-License-Identifier: MIT
"""Test support shared by every mori package: processes for multi-PE tests, and a pytest plugin.

:mod:`mori.testing.launcher` runs N PEs as N processes (:func:`run_processes`), N
executables as N ranks (:func:`run_commands`), or one helper process driven over a pipe
(:class:`PeerProcess`); each captures every process's output in a log of its own, kills every
process at a deadline, and reports which one failed, hung or died, with its log.
:mod:`mori.testing.pytest_plugin` (loaded by each package's ``tests/conftest.py`` through
``pytest_plugins``) adds the shared markers, the per-test timeout, the per-PE logs on failure and
the common fixtures. Only the plugin imports pytest; this package needs nothing beyond the standard
library.
"""

from __future__ import annotations

from mori.testing.launcher import (
    CommandResult,
    PeFailure,
    RankError,
    find_free_port,
    run_commands,
    run_processes,
)
from mori.testing.peer import PeerError, PeerProcess

__all__ = [
    "CommandResult",
    "PeFailure",
    "PeerError",
    "PeerProcess",
    "RankError",
    "find_free_port",
    "run_commands",
    "run_processes",
]
