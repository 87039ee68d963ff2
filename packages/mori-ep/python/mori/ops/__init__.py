"""mori.ops: the import path MORI users know for expert parallelism; it re-exports mori.ep."""

from __future__ import annotations

import mori.ep as _ep
from mori.ep import *  # noqa: F403  (re-exporting mori.ep is the point of this module)
from mori.ep.cpp_names import launch_local_expert_count as launch_local_expert_count
from mori.ops import dispatch_combine as dispatch_combine  # MORI's module of the EP v1 op
from mori.ops import dispatch_combine_v2 as dispatch_combine_v2  # MORI's path of the EP v2 API
from mori.ops import local_expert_count as local_expert_count
from mori.ops import tuning_config as tuning_config

__version__ = _ep.__version__
__all__ = [*_ep.__all__, "launch_local_expert_count"]
