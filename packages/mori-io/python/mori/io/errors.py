# SPDX-License-Identifier: MIT
"""Exceptions of mori.io.

Bad input raises before anything is sent, naming the argument, its value and the limit it broke.
Failures of a transfer in flight (peer lost, timeout) are not raised: they come back in its
``TransferStatus``, as in MORI. Each class also derives from the closest builtin, so callers may
catch either.
"""

from __future__ import annotations

from mori import errors as _root  # module, not names: the class list here stays the package's own


class MoriIoError(_root.MoriError):
    """Base class of every mori.io error."""


class InvalidArgumentError(MoriIoError, ValueError):
    """An argument is malformed or outside its allowed range."""


class NotFoundError(MoriIoError, LookupError):
    """A memory region or remote engine is not registered (or no longer)."""


class UnsupportedError(MoriIoError, NotImplementedError):
    """The request needs a backend or memory kind this build does not provide (e.g. GPU memory)."""


class ConnectionFailedError(MoriIoError, ConnectionError):
    """A remote engine could not be reached or stopped answering."""


class AuthenticationError(MoriIoError, PermissionError):
    """A peer did not prove it holds the engine's secret."""


class ProtocolError(MoriIoError, ConnectionError):
    """A peer sent something that is not valid mori.io protocol."""


class SystemCallError(MoriIoError, OSError):
    """A system call failed; the message carries errno's text."""


class TransferTimeoutError(MoriIoError, TimeoutError):
    """A peer did not answer within its deadline."""


class InternalError(MoriIoError, RuntimeError):
    """A bug in mori.io; please report it with the message."""


class EngineClosedError(MoriIoError, RuntimeError):
    """The engine was shut down; make a new one."""


class ConfigError(InvalidArgumentError, _root.SettingError):
    """A MORI_IO_* environment variable has a value that does not parse."""


class DescriptorError(InvalidArgumentError):
    """Bytes given to ``EngineDesc.unpack`` / ``MemoryDesc.unpack`` are not a valid descriptor."""


#: Codes of mori::io::Code (src/core/error.hpp) -> the class the native layer raises.
NATIVE_CODES: dict[int, type[MoriIoError]] = {
    1: InvalidArgumentError,
    2: NotFoundError,
    3: UnsupportedError,
    4: ConnectionFailedError,
    5: AuthenticationError,
    6: ProtocolError,
    7: SystemCallError,
    8: TransferTimeoutError,
    9: InternalError,
    10: EngineClosedError,
}


def check_int(name: str, value: object, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]``, else InvalidArgumentError naming it and the limits."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = value.__index__()  # type: ignore[attr-defined]
        except AttributeError:
            raise InvalidArgumentError(f"{name}={value!r} must be an int") from None
    assert isinstance(value, int)
    if not low <= value <= high:
        raise InvalidArgumentError(f"{name}={value} is out of range [{low}, {high}]")
    return value
