# SPDX-License-Identifier: MIT
"""``mori.kernel_profiler``: MORI's name for :mod:`mori.viz`; the same objects under the old path."""

from __future__ import annotations

from mori.viz import *  # noqa: F403
from mori.viz import __all__ as __all__
from mori.viz import __version__ as __version__
