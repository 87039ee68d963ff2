# SPDX-License-Identifier: MIT
"""GDA: one-sided puts, gets and signals between ranks of different nodes, through the remote
transport (MORI_CCO_RANKS_PER_NODE makes one host stand for several). Every received byte is
checked against the sender's pattern, recomputed here."""

from __future__ import annotations

import gda_programs
import numpy as np
import pytest
from conftest import backend_env

from mori.shmem.testing import run_pes


@pytest.mark.parametrize(("nranks", "per_node"), [(2, 1), (4, 2), (8, 2)])
def test_puts_gets_and_signals_cross_nodes(backend: str, nranks: int, per_node: int) -> None:
    results = run_pes(gda_programs.host_exchange, nranks, backend, env=backend_env(backend, per_node), timeout=240)
    num_nodes = nranks // per_node
    for rank, result in enumerate(results):
        node = rank // per_node
        assert result["topology"] == (node, num_nodes, rank % per_node, per_node)
        remote = [p for p in range(nranks) if p // per_node != node]
        assert result["remote"] == remote
        for peer in remote:
            np.testing.assert_array_equal(result["received"][peer], gda_programs.pattern(peer), err_msg=f"from {peer}")
        np.testing.assert_array_equal(result["fetched"], gda_programs.pattern(result["fetched_from"]))
        assert result["signals"] == [len(remote), sum(p + 1 for p in remote)]
        assert result["conduit"] in ("tcp", "ucx")


def test_bad_gda_calls_raise_naming_the_argument(backend: str) -> None:
    messages = run_pes(gda_programs.bad_gda_calls, 4, backend, env=backend_env(backend, 2))[0]
    expected = ["shares this rank's node", "peer=4 is outside", "run past its size", "signal_id=2",
                "signal_id=-2", "run past its size"]  # fmt: skip
    for needle, message in zip(expected, messages, strict=True):
        assert needle in message, (needle, message)


def test_gda_to_a_dead_peer_is_an_error_not_a_hang(backend: str) -> None:
    env = backend_env(backend, 1, MORI_CCO_TIMEOUT="5")
    results = run_pes(gda_programs.gda_to_dead_peer, 2, backend, env=env, timeout=120, return_exceptions=True)
    assert "PeerLost" in str(results[0]) or "Timeout" in str(results[0]), results[0]
