# SPDX-License-Identifier: MIT
"""Exceptions of mori.umbp.

Bad input raises before any RPC is sent and names the argument, its value and the limit. A master
or peer that does not answer within its deadline raises a typed error, never hangs. The root
``UMBPError`` is a ``RuntimeError``, as every error MORI's compiled UMBP module raises, so code
written against MORI (``except RuntimeError``) catches ours; each class also derives from the
closest other builtin (``ValueError``, ``ConnectionError``), so callers may catch either.
"""

from __future__ import annotations

from mori import errors as _root  # module, not names: the class list here stays the package's own


class UMBPError(_root.MoriError, RuntimeError):
    """Base class of every mori.umbp error; a RuntimeError, as MORI raises."""

    #: True when a server answered UNIMPLEMENTED (an older version without the call).
    unimplemented: bool = False


class InvalidArgumentError(UMBPError, ValueError):
    """An argument is malformed or outside its allowed range."""


class InvalidKeyError(InvalidArgumentError):
    """A block key is empty, too long, not text, or holds characters keys may not hold."""


class InvalidNodeIdError(InvalidArgumentError):
    """A node id is empty, too long, not text, or holds a separator of the master's store."""


class ValueTooLargeError(InvalidArgumentError):
    """A value is larger than the largest block this pool accepts."""


class UnknownTierError(InvalidArgumentError):
    """A tier is not one of UMBPTierType's, or not one the operation accepts."""


class TierCapacityError(ValueTooLargeError):
    """A block is larger than a tier (or the SSD staging buffer) can ever hold."""


class ConfigError(InvalidArgumentError, _root.SettingError):
    """A UMBP_* environment variable or a config field has a value that does not parse or fit."""


class TierUnavailableError(ConfigError):
    """A tier was asked for that this machine cannot provide (HBM without torch, CUDA or the device)."""


class MasterUnavailableError(UMBPError, ConnectionError):
    """The master did not answer within UMBP_RPC_TIMEOUT_MS (down, restarting or unreachable)."""


class PeerUnavailableError(UMBPError, ConnectionError):
    """A peer holding or receiving a block did not answer, or its transfer failed."""


class MetadataStoreError(UMBPError):
    """The master's metadata store (Redis) failed or cannot be reached."""


class ClosedError(UMBPError):
    """The client or server was closed; make a new one."""


class AuthenticationError(UMBPError, PermissionError):
    """A master or peer refused a request that did not prove the pool secret (UMBP_POOL_SECRET)."""


class PendingLimitError(UMBPError, RuntimeError):
    """This node already holds UMBP_MAX_PENDING_SLOTS_PER_NODE uncommitted slots on a peer."""


class NoRoomError(UMBPError):
    """No peer took a block within its put's deadline: what their tiers held that eviction must
    skip (read leases, pins, writes in flight) left no room for it. ``peer`` names the last peer
    that refused it, with the bytes the block ``needed`` and the bytes ``evictable`` there then.
    A put reports the block not stored (False, as MORI does) and logs this error."""

    def __init__(self, message: str, peer: str = "", needed: int = 0, evictable: int = 0) -> None:
        super().__init__(message)
        self.peer, self.needed, self.evictable = peer, needed, evictable
