# SPDX-License-Identifier: MIT
"""PEs that pass different configs to one op: creating it fails on every PE with
EpConfigMismatchError naming the field and both values (before any memory is allocated), and
matching configs still work afterwards. 2 and 4 PE processes."""

from __future__ import annotations

import compat_programs
import pytest

from mori.ep.config_check import first_difference
from mori.ep.workload import Workload
from mori.shmem.testing import run_pes


def _workload(world_size: int) -> Workload:
    return Workload(world_size=world_size, max_tokens=16, hidden=64, topk=4, experts_per_rank=4, tokens=12)


@pytest.mark.parametrize(
    ("world_size", "field", "value", "shown"),
    [
        (2, "num_experts_per_rank", 5, ("num_experts_per_rank is 4 on PE 0 but 5 on PE 1",)),
        (4, "hidden_dim", 128, ("hidden_dim is 64 on PE 0 but 128 on PE 3",)),
        (4, "num_experts_per_token", 3, ("num_experts_per_token is 4 on PE 0 but 3 on PE 3",)),
        (2, "max_num_inp_token_per_rank", 32, ("max_num_inp_token_per_rank is 16 on PE 0 but 32 on PE 1",)),
    ],
)
def test_a_differing_field_fails_on_every_pe(world_size: int, field: str, value: int, shown: tuple[str, ...]) -> None:
    w = _workload(world_size)
    odd = world_size - 1
    outcomes = run_pes(
        compat_programs.mismatched_configs, world_size, "cpu", w, odd, field, value,
        env={"MORI_SHMEM_BACKEND": "cpu"}, timeout=180,
    )  # fmt: skip
    for rank, outcome in enumerate(outcomes):
        assert outcome.startswith("EpConfigMismatchError: "), f"PE {rank}: {outcome}"
        for text in shown:
            assert text in outcome, f"PE {rank}: {outcome}"
    assert len(set(outcomes)) == 1, "every PE must report the same difference"


def test_same_configs_create_and_run() -> None:
    w = _workload(4)
    outcomes = run_pes(
        compat_programs.mismatched_configs, 4, "cpu", w, 0, "block_num", 80,
        env={"MORI_SHMEM_BACKEND": "cpu"}, timeout=180,
    )  # fmt: skip
    assert outcomes == ["no error"] * 4


def test_first_difference_names_the_lowest_pes_and_field() -> None:
    same = {"hidden_dim": "64", "top": "8"}
    assert first_difference([same, dict(same), dict(same)]) is None
    assert first_difference([same, same, {**same, "top": "9"}]) == ("top", 0, "8", 2, "9")
    assert first_difference([same, {"hidden_dim": "64"}]) == ("top", 0, "8", 1, "<absent>")
