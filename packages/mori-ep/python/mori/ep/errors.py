# SPDX-License-Identifier: MIT
"""mori-ep's exceptions. They derive from mori.shmem's classes (and so from the matching builtins:
ValueError, TimeoutError, ...), so one ``except MoriShmemError`` catches every mori failure."""

from __future__ import annotations

from mori.shmem.errors import (
    ConfigError,
    InvalidArgumentError,
    MoriShmemError,
    PeerLostError,
    UnsupportedError,
    WaitTimeoutError,
)


class EpError(MoriShmemError):
    """Base class of every mori.ep error."""


class EpConfigError(EpError, ConfigError):
    """An EpDispatchCombineConfig field or a MORI_EP_* variable is out of range."""


class EpConfigMismatchError(EpConfigError):
    """The PEs creating one op passed different configs (raised on every PE, naming the field)."""


class EpInputError(EpError, InvalidArgumentError):
    """A dispatch/combine argument is wrong (dtype, shape, device, expert id, ...); nothing was launched."""


class EpUnsupportedError(EpError, UnsupportedError):
    """The request is valid for MORI but not implemented by this build (a kernel type, a format)."""


class EpTimeoutError(EpError, WaitTimeoutError):
    """A dispatch/combine waited longer than MORI_EP_TIMEOUT for a peer (dead or stuck)."""


class EpPeerLostError(EpError, PeerLostError):
    """An inter-node kernel type could not reach a peer: mori-shmem's remote transport lost it."""


class EpOverflowError(EpError, RuntimeError):
    """More rows arrived than max_total_recv_tokens leaves room for; the excess rows were dropped."""


class EpRoutingError(EpInputError, TypeError):
    """``routing=`` is not a routing handle, came from another op, or does not fit this call (token
    count, shapes); nothing was launched. (A ``TypeError`` too, as MORI's v2 missing keyword is.)"""


class EpOpClosedError(EpError, RuntimeError):
    """The op was closed (``close()`` or the end of its ``with`` block) and cannot be used again."""


__all__ = [
    "EpConfigError",
    "EpConfigMismatchError",
    "EpError",
    "EpInputError",
    "EpOpClosedError",
    "EpOverflowError",
    "EpPeerLostError",
    "EpRoutingError",
    "EpTimeoutError",
    "EpUnsupportedError",
]
