# SPDX-License-Identifier: MIT
"""The symmetric heap: alignment, symmetry, exhaustion, invalid frees, P2P pointers, registration."""

from __future__ import annotations

import itertools

import pytest
from conftest import HEAP_SIZE

from mori.shmem.testing import run_pes

import pe_programs
from expectations import assert_error

MIB = 1 << 20


def roundup(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def mentions_size(message: str, n: int) -> bool:
    """The message states n bytes, in bytes or in a binary unit."""
    forms = {str(n), f"{n:,}", f"{n:_}"}
    for k, unit in ((1, "K"), (2, "M"), (3, "G")):
        if n % (1024**k) == 0:
            v = n // 1024**k
            forms |= {f"{v}{unit}", f"{v} {unit}iB", f"{v}{unit}iB", f"{v}.0 {unit}iB", f"{v} {unit}B", f"{v}{unit}B"}
    return any(f in message for f in forms)


@pytest.mark.parametrize("nranks", [1, 2, 4, 8])
def test_alignment_and_symmetric_offsets(nranks: int) -> None:
    results = run_pes(pe_programs.heap_layout, nranks, timeout=120)
    first = results[0]
    info0 = first["info0"]
    assert info0["size"] == HEAP_SIZE
    assert 0 < info0["reserved"] < info0["size"] and info0["reserved"] % 256 == 0
    assert info0["used"] == 0 and info0["num_allocations"] == 0
    assert info0["largest_free"] == info0["size"] - info0["reserved"]
    assert info0["backend"] == "cpu"
    assert info0["base"] % 4096 == 0
    # Same offsets on every PE (the addresses themselves may differ: separate mappings).
    for rank, r in enumerate(results):
        assert r["allocs"] == first["allocs"], f"rank {rank} allocated at different offsets"
    spans = []
    for kind, size, align, off in first["allocs"]:
        assert off % 256 == 0, (kind, size, align, off)
        assert info0["reserved"] <= off and off + size <= info0["size"], (kind, size, align, off)
        # malloc_align rounds the size up to the alignment.
        spans.append((off, off + roundup(size, align)))
    spans.sort()
    for (a_lo, a_hi), (b_lo, b_hi) in itertools.pairwise(spans):
        assert a_hi <= b_lo, f"allocations overlap: [{a_lo}, {a_hi}) and [{b_lo}, {b_hi})"
    for r in results:
        base = r["info0"]["base"]
        for kind, _size, align, off in r["allocs"]:
            assert (base + off) % align == 0, f"rank address {base + off:#x} not aligned to {align} ({kind})"
        info1 = r["info1"]
        assert info1["num_allocations"] == len(r["allocs"])
        assert info1["used"] >= sum(roundup(size, 256) for _, size, _, _ in r["allocs"])
        assert r["zero"] == 0
        assert r["info_zero_num"] == len(r["allocs"]), "malloc(0) / free(0) changed the allocation count"
        info2 = r["info2"]
        assert info2["num_allocations"] == 0 and info2["used"] == 0
        assert info2["largest_free"] == info0["largest_free"]


def test_malloc_align_rejects_bad_alignment() -> None:
    (r,) = run_pes(pe_programs.bad_alignment, 1, timeout=60)
    assert r.pop("num_allocations") == 0
    for align, err in r.items():
        assert_error(err, "InvalidArgumentError")
        assert "alignment" in err["message"] and align in err["message"], err["message"]


@pytest.mark.parametrize("nranks", [1, 2])
def test_heap_exhausted(nranks: int) -> None:
    for r in run_pes(pe_programs.heap_exhaustion, nranks, timeout=60):
        info = r["info"]
        huge = r["huge"]
        assert_error(huge, "HeapExhaustedError")
        assert "MemoryError" in huge["mro"]
        assert mentions_size(huge["message"], 128 * MIB), f"requested size missing: {huge['message']}"
        assert mentions_size(huge["message"], info["size"]), f"heap size missing: {huge['message']}"
        assert mentions_size(huge["message"], info["largest_free"]), f"largest free block missing: {huge['message']}"
        assert r["after_huge_num"] == 0 and r["after_huge_used"] == 0, "a failed malloc left state behind"
        # First fit from an empty heap: exactly floor(largest_free / 16 MiB) blocks fit.
        assert r["count"] == info["largest_free"] // (16 * MIB)
        assert_error(r["failure"], "HeapExhaustedError")
        assert mentions_size(r["failure"]["message"], 16 * MIB)
        assert r["largest_at_failure"] == info["largest_free"] - r["count"] * 16 * MIB
        assert r["final"]["num_allocations"] == 0 and r["final"]["largest_free"] == info["largest_free"]


@pytest.mark.parametrize("nranks", [1, 2])
def test_invalid_frees(nranks: int) -> None:
    for r in run_pes(pe_programs.bad_frees, nranks, timeout=60):
        for case in ("double_free", "interior", "foreign"):
            assert_error(r[case], "InvalidPointerError")
            assert "ValueError" in r[case]["mro"]
        assert r["num_after_errors"] == 1, "an invalid free changed the heap"
        assert r["num_final"] == 0


@pytest.mark.timeout(90)
def test_divergent_sizes_raise_symmetry_error() -> None:
    results = run_pes(pe_programs.symmetry_violation, 2, env={"MORI_BOOTSTRAP_TIMEOUT": "10"}, timeout=60)
    for rank, r in enumerate(results):
        errors = [e for e in r["errors"] if e]
        assert errors, f"rank {rank}: PEs allocated different sizes and nothing complained"
        assert errors[0]["type"] == "SymmetryError", errors[0]


@pytest.mark.timeout(90)
def test_divergent_sizes_accepted_without_symmetry_check() -> None:
    """MORI_SHMEM_CHECK_SYMMETRY=0 turns the check off (each PE then trusts its own allocator)."""
    results = run_pes(pe_programs.symmetry_violation, 2, env={"MORI_SHMEM_CHECK_SYMMETRY": "0"}, timeout=60)
    for r in results:
        assert r["errors"] == [None, None]


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_ptr_p2p(nranks: int) -> None:
    results = run_pes(pe_programs.p2p_pointers, nranks, timeout=120)
    for rank, r in enumerate(results):
        assert r["own"] == r["p"], "shmem_ptr_p2p(ptr, me, me) must return ptr"
        assert r["peers"][rank] == r["p"]
        for pe, q in r["peers"].items():
            assert q != 0 and q % 256 == 0, (pe, q)
        assert len(set(r["peers"].values())) == nranks, "two peers map to the same address"
        assert r["mismatches"] == [], f"rank {rank}: writes through p2p pointers not seen from {r['mismatches']}"
        assert r["offheap"] == 0 and r["past_end"] == 0
        assert r["interior"] == 100, "p2p translation does not preserve the offset inside an allocation"
        for case in ("dest_pe_npes", "dest_pe_neg", "my_pe_npes"):
            err = r[case]
            assert err is not None and err["type"] == "PeOutOfRangeError", (case, err)
            assert "IndexError" in err["mro"]
        msg = r["dest_pe_npes"]["message"]
        assert str(nranks) in msg and "dest_pe" in msg, f"message should name dest_pe, its value and the limit: {msg}"


@pytest.mark.parametrize("nranks", [1, 2])
def test_buffer_register(nranks: int) -> None:
    for r in run_pes(pe_programs.buffer_registration, nranks, timeout=60):
        assert r["register"] == 0 and r["deregister"] == 0
        assert r["roundtrip_ok"]
        assert_error(r["deregister_again"], "InvalidPointerError")
        assert_error(r["deregister_unknown"], "InvalidPointerError")
