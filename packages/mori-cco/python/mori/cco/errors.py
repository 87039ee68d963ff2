# SPDX-License-Identifier: MIT
"""Typed exceptions of mori.cco. The native module raises them by status code (cco.hpp's
ccoResult), so C++ and Python report the same failure the same way."""

from __future__ import annotations

from mori import errors as _root  # module, not names: the class list here stays the package's own


class CcoError(_root.MoriError, RuntimeError):
    """Base class of every mori.cco error."""


class CcoInvalidArgumentError(CcoError, ValueError):
    """An argument is out of range or of the wrong kind; the message names it, its value and the limit."""


class CcoSymmetryError(CcoError):
    """Ranks made a collective call with different arguments."""


class CcoOutOfMemoryError(CcoError, MemoryError):
    """The rank's slot (per_rank_vmm) or the memory behind it is exhausted."""


class CcoTimeoutError(CcoError, TimeoutError):
    """A peer did not answer within MORI_CCO_TIMEOUT / MORI_BOOTSTRAP_TIMEOUT."""


class CcoPeerLostError(CcoError, ConnectionError):
    """A peer left or failed authentication."""


class CcoUnsupportedError(CcoError, NotImplementedError):
    """Not possible on this backend or machine; the message says why."""


class CcoDeviceError(CcoError):
    """A kernel reported an error through the dev comm's error word (a wait expired)."""


#: ccoResult status -> exception class (ccoSystemError and ccoInternalError map to CcoError).
BY_STATUS: dict[int, type[CcoError]] = {
    1: CcoInvalidArgumentError,
    2: CcoSymmetryError,
    3: CcoOutOfMemoryError,
    4: CcoTimeoutError,
    5: CcoPeerLostError,
    6: CcoUnsupportedError,
}
