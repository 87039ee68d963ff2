# SPDX-License-Identifier: MIT
"""The errors the v2 API adds to mori.ep's: a missing or stale routing handle, a closed op, a
communicator it cannot run over, and MORI's JIT plans this build does not have.

All derive from ``EpError`` (so from ``MoriShmemError``), and from the builtins a caller written
for MORI would catch: MORI's ``combine`` without ``routing=`` fails with a ``TypeError``, and its
``ep_plans`` raises ``OSError`` where its library is not built.
"""

from __future__ import annotations

from mori.ep.errors import EpConfigError, EpError, EpInputError, EpUnsupportedError


class EpRoutingError(EpInputError, TypeError):
    """``routing=`` is missing, is not a v2 ``EpDispatchRoutingHandle``, came from another op, or
    does not fit this call (token count, shapes); nothing was launched."""


class EpOpClosedError(EpError, RuntimeError):
    """The op was closed (``close()`` or the end of its ``with`` block) and cannot be used again."""


class EpCommunicatorError(EpConfigError):
    """``comm`` cannot carry this op: mori-cco is not installed, it is not a
    ``mori.cco.Communicator``, or its ranks do not match the config; nothing was allocated."""


class EpPlansUnavailableError(EpUnsupportedError, OSError):
    """MORI's JIT plans (``ep_plans``, libmori_ops_v2.so) are not part of this build."""


__all__ = ["EpCommunicatorError", "EpOpClosedError", "EpPlansUnavailableError", "EpRoutingError"]
