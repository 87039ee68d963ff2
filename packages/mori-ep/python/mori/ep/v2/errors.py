# SPDX-License-Identifier: MIT
"""The errors the v2 API adds to mori.ep's: a missing or stale routing handle, a closed op, a
communicator it cannot run over, and MORI's JIT plans this build does not have.

All derive from ``EpError`` (so from ``MoriShmemError``), and from the builtins a caller written
for MORI would catch: MORI's ``combine`` without ``routing=`` fails with a ``TypeError``, and its
``ep_plans`` raises ``OSError`` where its library is not built.
"""

from __future__ import annotations

from mori.ep.errors import EpConfigError, EpOpClosedError, EpRoutingError, EpUnsupportedError

# EpRoutingError (``routing=`` missing, not a v2 handle, another op's, or not fitting the call) and
# EpOpClosedError are v1's classes (mori.ep.errors), the same objects under v2's names.


class EpCommunicatorError(EpConfigError):
    """``comm`` cannot carry this op: mori-cco is not installed, it is not a
    ``mori.cco.Communicator``, or its ranks do not match the config; nothing was allocated."""


class EpPlansUnavailableError(EpUnsupportedError, OSError):
    """MORI's JIT plans (``ep_plans``, libmori_ops_v2.so) are not part of this build."""


__all__ = ["EpCommunicatorError", "EpOpClosedError", "EpPlansUnavailableError", "EpRoutingError"]
