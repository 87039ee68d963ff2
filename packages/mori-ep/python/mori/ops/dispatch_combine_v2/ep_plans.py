# SPDX-License-Identifier: MIT
"""MORI's ``ep_plans``: the JIT plans (``EpDispatchPlan``, ``EpCombinePlan``, the internode
passes) of MORI's ``libmori_ops_v2.so``, HIP kernels for AMD GPUs.

MORI's module loads that library when imported and raises OSError where it is not built, which
code written for MORI handles (its binding tests skip on it). This build runs EP v2 on mori.ep's
kernels through ``EpDispatchCombineOp`` and has no such library, so importing this module always
raises that OSError, naming what to use instead.
"""

from __future__ import annotations

from mori.ep.v2.errors import EpPlansUnavailableError

raise EpPlansUnavailableError(
    "libmori_ops_v2.so (MORI's JIT v2 HIP kernels behind ep_plans) is not part of this build: EP v2 runs on "
    "mori.ep's kernels; use mori.ops.dispatch_combine_v2.EpDispatchCombineOp"
)
