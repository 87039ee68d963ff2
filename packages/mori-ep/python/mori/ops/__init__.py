"""mori.ops: the import path MORI users know for expert parallelism; it re-exports mori.ep."""

from __future__ import annotations

import mori.ep as _ep
from mori.ep import *  # noqa: F403  (re-exporting mori.ep is the point of this module)

__version__ = _ep.__version__
__all__ = list(_ep.__all__)
