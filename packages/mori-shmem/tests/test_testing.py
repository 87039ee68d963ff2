# SPDX-License-Identifier: MIT
"""mori.shmem.testing.run_pes, the multi-process harness every multi-PE test relies on."""

from __future__ import annotations

import os
import time

import pytest

from mori.shmem.testing import PeFailure, RankError, run_pes

import pe_programs


def test_results_in_rank_order_with_env() -> None:
    os.environ["MORI_TEST_UNSET_ME"] = "parent"
    try:
        results = run_pes(
            pe_programs.harness_echo_env,
            3,
            ["MORI_TEST_VALUE", "MORI_TEST_UNSET_ME"],
            env={"MORI_TEST_VALUE": "42", "MORI_TEST_UNSET_ME": None},
            timeout=60,
        )
    finally:
        del os.environ["MORI_TEST_UNSET_ME"]
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["nranks"] == 3 and r["uid_len"] == 128 for r in results)
    assert all(r["env"] == {"MORI_TEST_VALUE": "42", "MORI_TEST_UNSET_ME": None} for r in results)
    assert "MORI_TEST_VALUE" not in os.environ, "run_pes leaked env into the parent"


def test_exception_raises_pe_failure_with_traceback() -> None:
    with pytest.raises(PeFailure) as info:
        run_pes(pe_programs.harness_rank1_raises, 2, timeout=60)
    assert info.value.failed_ranks == [1]
    assert info.value.outcomes[0] == 0
    text = str(info.value)
    assert "KeyError" in text and "rank one failed on purpose" in text and "harness_rank1_raises" in text


def test_return_exceptions() -> None:
    ok, err = run_pes(pe_programs.harness_rank1_raises, 2, timeout=60, return_exceptions=True)
    assert ok == 0
    assert isinstance(err, RankError)
    assert err.type_name == "KeyError" and err.is_a("LookupError") and not err.is_a("ValueError")
    assert "rank one failed on purpose" in err.message
    assert "harness_rank1_raises" in err.traceback


@pytest.mark.timeout(60)
def test_hung_rank_is_killed_at_the_timeout() -> None:
    t0 = time.monotonic()
    with pytest.raises(PeFailure) as info:
        run_pes(pe_programs.harness_hang, 2, timeout=4)
    elapsed = time.monotonic() - t0
    assert elapsed < 20, f"run_pes took {elapsed:.1f} s with timeout=4"
    assert info.value.failed_ranks == [1]
    assert info.value.outcomes[1].type_name == "Timeout"


def test_unpicklable_result_is_reported() -> None:
    (err,) = run_pes(pe_programs.harness_unpicklable, 1, timeout=60, return_exceptions=True)
    assert isinstance(err, RankError) and err.type_name in ("PicklingError", "AttributeError", "TypeError"), err
