"""mori.ops.dispatch_combine_v2: MORI's import path of the EP v2 API; it re-exports mori.ep.v2."""

from __future__ import annotations

import mori.ep.v2 as _v2
from mori.ep.v2 import *  # noqa: F403  (re-exporting mori.ep.v2 is the point of this module)

__all__ = list(_v2.__all__)
