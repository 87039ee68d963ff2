# SPDX-License-Identifier: MIT
"""Exceptions of mori.shmem.

Every failure of the native library arrives as one of these classes, chosen by the status code
of the C ABI. Each also derives from the closest builtin (``ValueError``, ``TimeoutError``, ...)
so callers can catch either.
"""

from __future__ import annotations

from mori import errors as _root  # module, not names: the class list here stays the package's own


class MoriShmemError(_root.MoriError):
    """Base class of every mori.shmem error."""


class InvalidArgumentError(MoriShmemError, ValueError):
    """An argument is malformed or out of its allowed range."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong Python type (a str where an integer address or size belongs)."""


class NotInitializedError(MoriShmemError, RuntimeError):
    """The call needs an initialized PE (``shmem_init_attr`` first)."""


class AlreadyInitializedError(MoriShmemError, RuntimeError):
    """This process is already a PE; finalize before initializing again."""


class HeapExhaustedError(MoriShmemError, MemoryError):
    """The symmetric heap has no free block large enough (see ``MORI_SHMEM_HEAP_SIZE``)."""


class BootstrapTimeoutError(MoriShmemError, TimeoutError):
    """A rendezvous or bootstrap collective missed its deadline (``MORI_BOOTSTRAP_TIMEOUT``)."""


class WaitTimeoutError(MoriShmemError, TimeoutError):
    """``shmem_wait_until`` was not satisfied within its timeout."""


class PeerLostError(MoriShmemError, ConnectionError):
    """A peer PE died or closed its bootstrap connection."""


class AuthenticationError(MoriShmemError, PermissionError):
    """A peer did not prove knowledge of the job secret carried in the unique id."""


class SymmetryError(MoriShmemError, RuntimeError):
    """PEs diverged: they made different collective calls or got different heap offsets."""


class InvalidPointerError(MoriShmemError, ValueError):
    """A pointer is not a live symmetric allocation (double free, foreign or out-of-heap pointer)."""


class PeOutOfRangeError(MoriShmemError, IndexError):
    """A PE number is outside ``[0, npes)``."""


class UnsupportedError(MoriShmemError, RuntimeError):
    """The request needs a feature this build or backend does not have."""


class SystemCallError(MoriShmemError, OSError):
    """A system call failed (the message carries errno's text)."""


class InternalError(MoriShmemError, RuntimeError):
    """A bug in mori.shmem; please report it with the message."""


class ConfigError(MoriShmemError, _root.SettingError):
    """An environment variable has a value that does not parse."""


# Status codes of mori_shmem_status_t (include/mori_shmem/mori_shmem.h).
STATUS_CLASSES: dict[int, type[MoriShmemError]] = {
    1: InvalidArgumentError,
    2: NotInitializedError,
    3: AlreadyInitializedError,
    4: HeapExhaustedError,
    5: BootstrapTimeoutError,
    6: PeerLostError,
    7: AuthenticationError,
    8: SystemCallError,
    9: SymmetryError,
    10: InvalidPointerError,
    11: PeOutOfRangeError,
    12: UnsupportedError,
    13: InternalError,
    14: ConfigError,
    15: WaitTimeoutError,
}

__all__ = [
    "AlreadyInitializedError",
    "AuthenticationError",
    "BootstrapTimeoutError",
    "ConfigError",
    "HeapExhaustedError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidPointerError",
    "MoriShmemError",
    "NotInitializedError",
    "PeOutOfRangeError",
    "PeerLostError",
    "SymmetryError",
    "SystemCallError",
    "UnsupportedError",
    "WaitTimeoutError",
]
