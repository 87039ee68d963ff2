# SPDX-License-Identifier: MIT
"""Host RMA: put/get, put-with-signal, atomics, waits, ordering and argument errors.

References: numpy byte arrays for data movement, Python integer arithmetic with explicit
two's-complement wraparound for atomics, Python's comparison operators for waits.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mori.shmem.testing import run_pes

import pe_programs
from expectations import assert_error
from pe_programs import INT_DTYPES, wrap

# ----------------------------------------------------------------------------- put / get


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_putmem_to_every_peer(nranks: int) -> None:
    for rank, r in enumerate(run_pes(pe_programs.put_all_to_all, nranks, timeout=180)):
        assert r["failures"] == [], f"rank {rank}: {r['failures'][:10]}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_getmem_from_every_peer(nranks: int) -> None:
    for rank, r in enumerate(run_pes(pe_programs.get_all_to_all, nranks, timeout=180)):
        assert r["failures"] == [], f"rank {rank}: {r['failures'][:10]}"


@pytest.mark.parametrize("nranks", [2, 4])
def test_put_get_array_forms(nranks: int) -> None:
    for r in run_pes(pe_programs.put_get_array_forms, nranks, timeout=90):
        assert r == {"put_ok": True, "get_ok": True}


def test_fence_orders_puts() -> None:
    for r in run_pes(pe_programs.fence_quiet_ordering, 2, 200, timeout=90):
        assert r["failures"] == [], f"flag seen before data in rounds {r['failures'][:10]}"


# ----------------------------------------------------------------------------- put with signal

message = st.tuples(
    st.integers(min_value=1, max_value=256 * 1024),
    st.sampled_from(["set", "add"]),
    st.integers(min_value=1, max_value=2**64 - 1),
)


@pytest.mark.timeout(400)
@settings(max_examples=6, deadline=None)
@given(
    messages=st.lists(message, min_size=1, max_size=12).map(
        lambda ms: [(size, op, value if op == "set" else value % (1 << 63) + 1) for size, op, value in ms]
    ),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_putmem_signal_data_complete_when_signal_seen(messages: list, seed: int) -> None:
    _, receiver = run_pes(pe_programs.putmem_signal_stream, 2, messages, seed, timeout=90)
    assert receiver["failures"] == []
    # The reference signal sequence, computed here.
    expect, cur = [], 0
    for i, (_, op, value) in enumerate(messages):
        cur = ((i + 1) << 40) | (value & ((1 << 40) - 1)) if op == "set" else (cur + value) % (1 << 64)
        expect.append(cur)
    assert receiver["observed"] == expect


@pytest.mark.parametrize("nranks", [2, 4])
def test_signal_op_and_fetch(nranks: int) -> None:
    results = run_pes(pe_programs.signal_ops, nranks, timeout=60)
    assert results[0]["total"] == sum(1000 + r for r in range(nranks))
    for rank, r in enumerate(results):
        assert r["got"] == r["fetched"] == 0xDEADBEEF00 + rank


# ----------------------------------------------------------------------------- atomics


def check_atomics(results: list[dict], nranks: int, m: int) -> None:
    for name in results[0]:
        info = np.iinfo(np.dtype(name))
        lo, hi, bits = int(info.min), int(info.max), info.bits
        per = [r[name] for r in results]
        final = per[0]["final"]
        ctx = f"[{name}, {nranks} PEs]"
        # add (wraps past max) and add of negatives / small values
        assert final[0] == wrap(hi - 2 + m * sum(r + 1 for r in range(nranks)), name), ctx
        if lo < 0:
            assert final[1] == wrap(lo + 2 - m * sum(r + 1 for r in range(nranks)), name), ctx
        else:
            assert final[1] == wrap(5 + m * sum(r + 1 for r in range(nranks)), name), ctx
        # fetch_add: the old values are exactly init + 3k for k < npes*m, whatever the interleaving
        olds = Counter(v for p in per for v in p["fetch_add"])
        assert olds == Counter(wrap(hi - 5 + 3 * k, name) for k in range(nranks * m)), ctx
        assert final[2] == wrap(hi - 5 + 3 * nranks * m, name), ctx
        for p in per:  # each PE's own fetches are increasing in issue order (modulo wrap)
            steps = [wrap(b - a, name) % (1 << bits) for a, b in itertools.pairwise(p["fetch_add"])]
            assert all(s % 3 == 0 and s > 0 for s in steps), ctx
        olds = Counter(v for p in per for v in p["fetch_inc"])
        assert olds == Counter(wrap(hi - 1 + k, name) for k in range(nranks * m)), ctx
        assert final[3] == wrap(hi - 1 + nranks * m, name), ctx
        assert final[4] == nranks * m, ctx
        # set + fetch
        for rank, p in enumerate(per):
            assert p["set_fetch"] == p["set_expect"], ctx
            assert p["set_local"] == per[(rank - 1) % nranks]["set_expect"], ctx
        # compare_swap: exactly one winner; losers see the winner's value
        init_cas = wrap(0x1234567, name)
        winners = [rank for rank, p in enumerate(per) if p["cas_old"] == init_cas]
        assert len(winners) == 1, f"{ctx} CAS winners {winners}"
        assert final[20] == 100 + winners[0], ctx
        assert all(p["cas_old"] == 100 + winners[0] for rank, p in enumerate(per) if rank != winners[0]), ctx
        assert final[21] == nranks * m, f"{ctx} CAS-loop counter"
        # swap: old values plus the final value are a permutation of the initial value and the tokens
        tokens = [wrap(-(1000 + r) if lo < 0 else 1000 + r, name) for r in range(nranks)]
        assert Counter([p["swap_old"] for p in per] + [final[22]]) == Counter([7, *tokens]), ctx
        # bitwise, contended
        or_expect = reduce(operator.or_, ((1 << r) | (1 << (bits - 1 - r)) for r in range(nranks)), 0)
        assert final[23] == wrap(or_expect, name), ctx
        assert final[24] == wrap(~or_expect, name), ctx
        xor_expect = reduce(operator.xor, (p["xor_mask"] for p in per), wrap(0x0F0F0F0F0F0F0F0F, name))
        assert final[25] == wrap(xor_expect, name), ctx
        for p in per:
            assert p["bitwise_seq"] == p["bitwise_seq_expect"], ctx
            assert p["sentinels"] == [wrap(0x5A5A5A5A5A5A5A5A, name)] * 4, f"{ctx} neighbouring cells changed"
            assert p["generic"] == {"add": None, "fetch_add": 5, "cas_fail": 7, "cas_ok": 7, "final": 9}, ctx


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_atomics_two_pes(dtype: str) -> None:
    m = 25
    check_atomics(run_pes(pe_programs.atomics, 2, [dtype], m, timeout=90), 2, m)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("nranks", [4, 8])
def test_atomics_contended(nranks: int) -> None:
    m = 10
    check_atomics(run_pes(pe_programs.atomics, nranks, list(INT_DTYPES), m, timeout=180), nranks, m)


# ----------------------------------------------------------------------------- waits

CMP = {
    "EQ": operator.eq,
    "NE": operator.ne,
    "GT": operator.gt,
    "LE": operator.le,
    "LT": operator.lt,
    "GE": operator.ge,
}


def test_test_and_wait_until_every_cmp() -> None:
    (r,) = run_pes(pe_programs.wait_and_test_local, 1, timeout=120)
    outcomes = r["outcomes"]
    # 7 boundary values for signed dtypes, 5 for unsigned: (2 * 49 + 2 * 25) * 6 combinations.
    assert len(outcomes) == 888
    wrong = []
    for name, x, cmp, v, t, w in outcomes:
        expect = CMP[cmp](x, v)
        if t != expect:
            wrong.append(f"shmem_test({name} {x} {cmp} {v}) = {t}")
        if expect and w != x:
            wrong.append(f"wait_until({name} {x} {cmp} {v}) returned {w}, expected {x}")
        if not expect and w != "WaitTimeoutError":
            wrong.append(f"wait_until({name} {x} {cmp} {v}) unsatisfiable: {w}")
    assert not wrong, "\n".join(wrong[:20])


def test_wait_until_wakes_on_remote_update() -> None:
    rounds = run_pes(pe_programs.wait_remote_wakeup, 2, timeout=60)[0]["rounds"]
    assert len(rounds) == 6
    for cmp, target, new, got, elapsed in rounds:
        assert got == new, (cmp, target, new, got)
        assert CMP[cmp](got, target)
        assert elapsed >= 0.15, f"{cmp}: wait_until returned after {elapsed:.3f} s, before the update"


def test_wait_until_timeout() -> None:
    (r,) = run_pes(pe_programs.wait_timeouts, 1, env={"MORI_SHMEM_WAIT_TIMEOUT": "1"}, timeout=60)
    assert_error(r["explicit"], "WaitTimeoutError")
    assert "TimeoutError" in r["explicit"]["mro"]
    assert 0.45 <= r["explicit_elapsed"] <= 3.0, r["explicit_elapsed"]
    assert_error(r["from_env"], "WaitTimeoutError")
    assert 0.9 <= r["env_elapsed"] <= 5.0, r["env_elapsed"]
    assert r["test_false"] is False


# ----------------------------------------------------------------------------- argument errors


@pytest.mark.parametrize("nranks", [1, 2])
def test_rma_argument_errors(nranks: int) -> None:
    for r in run_pes(pe_programs.rma_errors, nranks, timeout=60):
        for case in (
            "put_pe_npes",
            "put_pe_neg",
            "get_pe_npes",
            "atomic_pe_npes",
            "fetch_add_pe_neg",
            "signal_pe_npes",
            "put_signal_pe_npes",
        ):
            assert_error(r[case], "PeOutOfRangeError")
        msg = r["put_pe_npes"]["message"]
        assert "pe" in msg and str(nranks) in msg, f"message should name pe, its value and the limit: {msg}"
        for case in (
            "put_dest_offheap",
            "get_src_offheap",
            "put_past_end",
            "get_past_end",
            "atomic_offheap",
            "fetch_offheap",
            "signal_offheap",
        ):
            assert_error(r[case], "InvalidPointerError")
        local = r["addresses"]["local"]
        msg = r["put_dest_offheap"]["message"]
        assert "dest" in msg, f"message should name the argument: {msg}"
        assert hex(local) in msg.lower() or str(local) in msg, f"message should show the address: {msg}"
        assert_error(r["atomic_misaligned"], "InvalidArgumentError", "InvalidPointerError")
        assert_error(r["atomic_float"], "InvalidArgumentError")
        assert_error(r["atomic_value_range"], "InvalidArgumentError")
        assert r["quiet"] is None and r["fence"] is None
        assert r["num_allocations"] == 1
