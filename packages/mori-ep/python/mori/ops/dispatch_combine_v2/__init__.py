# SPDX-License-Identifier: MIT
"""mori.ops.dispatch_combine_v2: MORI's package of the EP v2 API, over mori.ep.v2.

As in MORI, the package exports the op module's three classes (and mori.ep.v2's errors); its
submodules are MORI's: ``dispatch_combine_op`` (the op and its config), ``tuning_configs``
(``lookup``) and ``ep_plans`` (MORI's JIT plans of libmori_ops_v2.so, which this build does not
have: importing it raises OSError, as MORI's does where the library is not built).
"""

from __future__ import annotations

import mori.ep.v2 as _v2
from mori.ep.v2 import *  # noqa: F403  (re-exporting mori.ep.v2 is the point of this package)

__all__ = list(_v2.__all__)
