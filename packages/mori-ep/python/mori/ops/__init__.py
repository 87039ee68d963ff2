"""mori.ops: the import path MORI users know for expert parallelism; it re-exports mori.ep."""

from __future__ import annotations

import mori.ep as _ep
from mori.ep import *  # noqa: F403  (re-exporting mori.ep is the point of this module)
from mori.ops import dispatch_combine_v2 as dispatch_combine_v2  # MORI's path of the EP v2 API

__version__ = _ep.__version__
__all__ = list(_ep.__all__)
