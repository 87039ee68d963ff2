# SPDX-License-Identifier: MIT
"""LSA teams set by MORI's settings: MORI_VPOD_ID (manual teams), MORI_CCO_FABRIC_CROSSNODE_LSA
(one team), MORI_CCO_FABRIC_DISABLE (host grouping wins), and the typed errors when a grouping
cannot hold. Teams are checked by what the ranks read through the flat range (each peer wrote its
own world rank) and, between teams, by GDA transfers checked byte for byte."""

from __future__ import annotations

import gda_programs
import lsa_team_programs
import numpy as np
import pytest
from conftest import backend_env

from mori.shmem.testing import run_pes

NRANKS = 4


def _run_teams(backend: str, shared: dict[str, str], envs: list[dict[str, str | None]]) -> list[dict]:
    hostnames: list[str | None] = [None] * NRANKS
    return run_pes(lsa_team_programs.teams, NRANKS, backend, envs, hostnames, env=backend_env(backend, **shared),
                   timeout=180)  # fmt: skip


def _check_teams(results: list[dict], team_size: int) -> None:
    for rank, result in enumerate(results):
        node, start = rank // team_size, rank - rank % team_size
        assert result["topology"] == (node, NRANKS // team_size, rank % team_size, team_size), rank
        assert result["seen"] == list(range(start, start + team_size)), rank


def test_vpod_id_makes_teams_across_simulated_hosts(backend: str) -> None:
    """Four simulated hosts of one rank each; MORI_VPOD_ID pairs them into two LSA teams (the ids
    are labels, not indexes), which load and store each other's slots."""
    envs: list[dict[str, str | None]] = [{"MORI_VPOD_ID": v} for v in ("7", "7", "3", "3")]
    _check_teams(_run_teams(backend, {"MORI_CCO_RANKS_PER_NODE": "1"}, envs), team_size=2)


def test_crossnode_lsa_makes_the_world_one_team(backend: str) -> None:
    envs: list[dict[str, str | None]] = [{}] * NRANKS
    shared = {"MORI_CCO_RANKS_PER_NODE": "2", "MORI_CCO_FABRIC_CROSSNODE_LSA": "1"}
    _check_teams(_run_teams(backend, shared, envs), team_size=NRANKS)


def test_fabric_disable_keeps_host_teams(backend: str) -> None:
    envs: list[dict[str, str | None]] = [{}] * NRANKS
    shared = {"MORI_CCO_RANKS_PER_NODE": "2", "MORI_VPOD_ID": "0", "MORI_CCO_FABRIC_CROSSNODE_LSA": "1",
              "MORI_CCO_FABRIC_DISABLE": "1"}  # fmt: skip
    _check_teams(_run_teams(backend, shared, envs), team_size=2)


def test_gda_reaches_the_other_manual_team(backend: str) -> None:
    """One machine, no simulated hosts: MORI_VPOD_ID alone splits the four ranks into two teams,
    and each rank reaches the other team through GDA."""
    envs: list[dict[str, str | None]] = [{"MORI_VPOD_ID": str(r // 2)} for r in range(NRANKS)]
    results = run_pes(lsa_team_programs.gda_between_teams, NRANKS, backend, envs, env=backend_env(backend),
                      timeout=240)  # fmt: skip
    for rank, result in enumerate(results):
        assert result["topology"] == (rank // 2, 2, rank % 2, 2)
        remote = [p for p in range(NRANKS) if p // 2 != rank // 2]
        assert result["remote"] == remote
        for peer in remote:
            np.testing.assert_array_equal(result["received"][peer], gda_programs.pattern(peer), err_msg=f"from {peer}")


BAD_GROUPINGS = {
    "vpod_on_some_ranks": (
        [{"MORI_VPOD_ID": "0"}, {"MORI_VPOD_ID": "0"}, {}, {}],
        "CcoInvalidArgumentError",
        "MORI_VPOD_ID asks for manual LSA teams on ranks 0, 1 but ranks 2, 3 group by host; manual grouping is "
        "all ranks or none",
    ),
    "disable_on_one_rank": (
        [{"MORI_VPOD_ID": "0"}] * 3 + [{"MORI_VPOD_ID": "0", "MORI_CCO_FABRIC_DISABLE": "1"}],
        "CcoInvalidArgumentError",
        "but ranks 3 group by host (MORI_CCO_FABRIC_DISABLE on ranks 3)",
    ),
    "team_not_contiguous": (
        [{"MORI_VPOD_ID": str(r % 2)} for r in range(NRANKS)],
        "CcoInvalidArgumentError",
        "MORI_VPOD_ID: ranks 0 and 2 are in one LSA team but ranks between them are not",
    ),
    "teams_of_two_sizes": (
        [{"MORI_VPOD_ID": v} for v in ("0", "0", "0", "1")],
        "CcoInvalidArgumentError",
        "MORI_VPOD_ID: the first LSA team has 3 of the 4 ranks over 2 teams; every team needs the same number",
    ),
    "not_an_integer": (
        [{"MORI_VPOD_ID": "pod-a"}] * NRANKS,
        "CcoInvalidArgumentError",
        "MORI_VPOD_ID=pod-a is not a non-negative integer",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_GROUPINGS))
def test_a_grouping_that_cannot_hold_fails_on_every_rank(case: str) -> None:
    envs, error, message = BAD_GROUPINGS[case]
    results = run_pes(lsa_team_programs.init_error, NRANKS, "cpu", envs, [None] * NRANKS,
                      env=backend_env("cpu"), timeout=120)  # fmt: skip
    for rank, (kind, text) in enumerate(results):
        assert kind == error and message in text, (rank, kind, text)


def test_a_team_across_machines_is_refused() -> None:
    """Ranks 2 and 3 get a host name of their own (a UTS namespace): the whole-world team would
    span two machines, whose slots mori-cco cannot map, so every rank refuses, naming why."""
    hostnames: list[str | None] = ["machine-a", "machine-a", "machine-b", "machine-b"]
    envs: list[dict[str, str | None]] = [{}] * NRANKS
    results = run_pes(lsa_team_programs.init_error, NRANKS, "cpu", envs, hostnames,
                      env=backend_env("cpu", MORI_CCO_FABRIC_CROSSNODE_LSA="1"), timeout=120)  # fmt: skip
    if any(kind == "NoHostNamespace" for kind, _ in results):
        pytest.skip(f"cannot give a process its own host name here: {results}")
    for rank, (kind, text) in enumerate(results):
        assert kind == "CcoUnsupportedError", (rank, kind, text)
        assert "MORI_CCO_FABRIC_CROSSNODE_LSA puts ranks 1 and 2 in one LSA team" in text, text
        assert "rank 1 runs on host machine-a and rank 2 on host machine-b" in text, text


def test_a_bad_value_on_one_rank_fails_every_rank_without_waiting() -> None:
    """Only rank 0's MORI_VPOD_ID does not parse: it names the value, the others name rank 0,
    and nobody waits for a timeout."""
    envs: list[dict[str, str | None]] = [{"MORI_VPOD_ID": "pod-a"}] + [{"MORI_VPOD_ID": "0"}] * (NRANKS - 1)
    results = run_pes(lsa_team_programs.init_error, NRANKS, "cpu", envs, [None] * NRANKS,
                      env=backend_env("cpu", MORI_BOOTSTRAP_TIMEOUT="300"), timeout=60)  # fmt: skip
    assert results[0] == ("CcoInvalidArgumentError", "MORI_VPOD_ID=pod-a is not a non-negative integer")
    for rank in range(1, NRANKS):
        assert results[rank][0] == "CcoInvalidArgumentError"
        assert "rank 0's grouping settings" in results[rank][1], results[rank]
