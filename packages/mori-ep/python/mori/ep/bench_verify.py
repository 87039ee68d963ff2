# SPDX-License-Identifier: MIT
"""``mori-ep-bench``'s verification: every PE checks the outputs of the last timed iteration of
each case (dispatched rows, ids, weights, scales, source positions, total_recv, and the combined
rows and weights of the identity expert) against :mod:`mori.ep.reference`, the same reference
the tests use. A mismatch fails the run with a message naming the PE, the kernel type, the first
mismatching row and field, and the values.

``--test-only-corrupt PE:PHASE`` (hidden, for the tests of this module only) flips bytes of one
received row (``dispatch``) or of one combined row (``combine``) on PE ``PE`` after the timed
iterations and before the check, so that a test can show a wrong result fails the run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from mori.ep import reference
from mori.ep.workload import Workload

#: What the verification compares, as the JSON report lists it.
CHECKED = (
    "total_recv: the number of rows each PE must receive",
    "source positions: every token routed to the PE exactly once, nothing else",
    "dispatched token bytes, top-k expert ids, weights and scales of every received row",
    "combined rows: U * x with an identity expert (U = distinct destination PEs of the token)",
    "combined weights: U * w",
)
WHEN = "the last timed iteration of every case and launch geometry, on every PE"
PHASES = ("dispatch", "combine")


@dataclass(frozen=True)
class Corruption:
    """Test-only fault injection: which PE damages which phase's output before the check."""

    pe: int
    phase: str


def parse_corruption(text: str) -> Corruption:
    """``PE:PHASE`` of ``--test-only-corrupt``; ValueError names the expected form."""
    pe, _, phase = text.partition(":")
    if not pe.isdigit() or phase not in PHASES:
        raise ValueError(f"--test-only-corrupt={text!r}: expected PE:PHASE with PHASE one of {PHASES}")
    return Corruption(int(pe), phase)


def corrupt(corruption: Corruption | None, rank: int, dispatched: Any, combined: Any, total: int) -> None:
    """Flips the high bits of every byte of one row of this PE's dispatch or combine output (the
    op's own buffers, which the check then reads), when ``corruption`` names this PE."""
    import torch

    if corruption is None or corruption.pe != rank:
        return
    rows = dispatched[0][:total] if corruption.phase == "dispatch" else combined[0]
    if rows.shape[0] == 0:
        raise RuntimeError(f"--test-only-corrupt: PE {rank} has no {corruption.phase} rows to corrupt")
    row = rows[rows.shape[0] // 2].view(torch.uint8)
    row.bitwise_xor_(0x60)  # exponent bits: a wrong value in every format, never a no-op


def verify(
    op: Any,
    w: Workload,
    rank: int,
    dispatched: Any,
    combined: Any,
    *,
    combine_dtype: Any,
    quant: str,
    gpu_per_node: int,
) -> dict[str, Any]:
    """The check of one timed iteration on this PE: ``{"ok", "mismatch", "tolerance", "seconds"}``
    (seconds: how long the check took, outside the timed region)."""
    started = time.perf_counter()
    kernel_type = op.config.kernel_type.name
    tolerance = reference.combine_tolerance(w, kernel_type, combine_dtype, quant, gpu_per_node)
    quant_blocks = int(op.layout.quant_blocks)
    _, mismatch = reference.check_dispatch(w, rank, 0, dispatched[:5], op.get_dispatch_src_token_pos())
    phase = "dispatch"
    if mismatch is None:
        phase = "combine"
        mismatch = reference.check_combine(
            w, rank, 0, combined[0], combined[1], combine_dtype, quant, tolerance, quant_blocks
        )
    return {
        "ok": mismatch is None,
        "mismatch": None if mismatch is None else f"{phase}: {mismatch}",
        "tolerance": asdict(tolerance),
        "seconds": time.perf_counter() - started,
    }


def failure_message(rank: int, kernel_type: str, tokens: int, launch: Sequence[int], mismatch: str) -> str:
    """The run's error line; ``launch`` is dispatch's launch config (blocks, rdma blocks, warps)."""
    return (
        f"verification failed on PE {rank}: kernel type {kernel_type}, {tokens} tokens/PE, "
        f"{launch[0]} blocks x {launch[2]} warps, last timed iteration: {mismatch}"
    )
