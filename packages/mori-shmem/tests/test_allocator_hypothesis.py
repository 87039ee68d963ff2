# SPDX-License-Identifier: MIT
"""Property tests of the symmetric allocator.

Single PE: a hypothesis state machine runs inside one initialized PE (see
pe_programs.hypothesis_allocator): no two live allocations overlap, all are aligned and inside
[base + reserved, base + size), failures happen only when no free block can hold the request,
and freeing everything restores the initial largest free block.

Two PEs: both run the same seeded random sequence; the offsets must be identical, and the parent
re-checks overlap and alignment from the returned trace.
"""

from __future__ import annotations

import pytest

from mori.shmem.testing import run_pes

import pe_programs


def roundup(n: int, a: int) -> int:
    return (n + a - 1) // a * a


@pytest.mark.timeout(300)
def test_state_machine_single_pe() -> None:
    (stats,) = run_pes(pe_programs.hypothesis_allocator, 1, 60, timeout=240)
    # The machine really exercised the allocator.
    assert stats["mallocs"] > 100 and stats["frees"] > 20, stats


def replay(trace: list, reserved: int, size: int) -> dict[int, tuple[int, int]]:
    """Replays the trace with a reference model; checks every malloc against the live set."""
    live: dict[int, tuple[int, int]] = {}
    for step in trace:
        if step[0] == "free":
            assert step[1] in live, f"freed offset {step[1]} that is not live"
            del live[step[1]]
            continue
        _, off, n, align = step
        assert off % align == 0 and off % 256 == 0, step
        hi = off + roundup(n, align)
        assert reserved <= off and hi <= size, step
        for o, (m, a) in live.items():
            assert hi <= o or o + roundup(m, a) <= off, f"{step} overlaps live block at {o} ({m} B)"
        live[off] = (n, align)
    return live


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_sequence_same_offsets_two_pes(seed: int) -> None:
    results = run_pes(pe_programs.seeded_alloc_sequence, 2, seed, 150, timeout=120)
    a, b = results
    assert a["trace"] == b["trace"], "the two PEs got different offsets for the same sequence"
    info0 = a["info0"]
    live = replay(a["trace"], info0["reserved"], info0["size"])
    assert live == a["live"]
    for r in results:
        assert r["info_live"]["num_allocations"] == len(live)
        assert r["info_live"]["used"] >= sum(roundup(n, 256) for n, _ in live.values())
        assert r["info_end"]["num_allocations"] == 0 and r["info_end"]["used"] == 0
        assert r["info_end"]["largest_free"] == r["info0"]["largest_free"]
