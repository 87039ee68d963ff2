# SPDX-License-Identifier: MIT
"""The two errors the v2 API adds to mori.ep's: a missing or stale routing handle, and a closed op.

Both derive from ``EpError`` (so from ``MoriShmemError``), and from the builtins a caller written
for MORI would catch: MORI's ``combine`` without ``routing=`` fails with a ``TypeError``.
"""

from __future__ import annotations

from mori.ep.errors import EpError, EpInputError


class EpRoutingError(EpInputError, TypeError):
    """``routing=`` is missing, is not a v2 ``EpDispatchRoutingHandle``, came from another op, or
    does not fit this call (token count, shapes); nothing was launched."""


class EpOpClosedError(EpError, RuntimeError):
    """The op was closed (``close()`` or the end of its ``with`` block) and cannot be used again."""


__all__ = ["EpOpClosedError", "EpRoutingError"]
