# SPDX-License-Identifier: MIT
"""The remote transport of the cpu backend: PEs on different "nodes" talk through a conduit.

Nodes are made on one machine by MORI_SHMEM_PES_PER_NODE, MORI_DISABLE_P2P, and (where the machine
allows it) network namespaces joined by a veth pair with MORI_NODE_ID. Every host call that
crosses nodes is checked against references computed here: numpy patterns from seeds for data,
Python integer arithmetic with explicit wraparound for atomics and signals. The checks run for
both conduits, tcp (mori's own) and ucx (the libucx wheel's UCX, which in error mode PEER runs its
endpoints over tcp here: the endpoints' transports are printed and checked).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mori.shmem.settings import libucx_wheel_dir
from mori.shmem.testing import RankError, run_pes

import remote_programs
from pe_programs import wrap
from remote_programs import FIXED_CASES, MESSAGES, atomic_plans, plan_init, signal_value

TESTS_DIR = Path(__file__).resolve().parent
MiB = 1 << 20

# name: (PEs, environment, node of a rank)
LAYOUTS: dict[str, tuple[int, dict[str, str], Callable[[int], int]]] = {
    "2pe-disable-p2p-1-stream": (2, {"MORI_DISABLE_P2P": "1", "MORI_SHMEM_REMOTE_STREAMS": "1"}, lambda r: r),
    # Serving threads that poll for the next request before they sleep serve the same bytes.
    "4pe-2-nodes-serve-spin": (
        4,
        {"MORI_SHMEM_PES_PER_NODE": "2", "MORI_SHMEM_REMOTE_SERVE_SPIN_US": "200"},
        lambda r: r // 2,
    ),
    "8pe-2-nodes-3-streams": (8, {"MORI_SHMEM_PES_PER_NODE": "4", "MORI_SHMEM_REMOTE_STREAMS": "3"}, lambda r: r // 4),
}


def _ucx_findable() -> bool:
    if libucx_wheel_dir() is not None or os.environ.get("MORI_SHMEM_UCX_DIR"):
        return True
    import ctypes.util

    return ctypes.util.find_library("ucp") is not None


# The conduits every crossing test runs over; ucx needs UCX (the libucx-cu12 test dependency).
CONDUITS = [
    "tcp",
    pytest.param("ucx", marks=pytest.mark.skipif(not _ucx_findable(), reason="no UCX (pip install libucx-cu12)")),
]


def conduit_env(conduit: str, env: dict[str, str] | None = None) -> dict[str, str]:
    return {**(env or {}), "MORI_SHMEM_REMOTE_CONDUIT": conduit}


# ----------------------------------------------------------------------------- references


def simulate(plan: list[tuple[str, int, int]], init: int, name: str) -> tuple[list[int | None], int]:
    """What each call of remote_programs.run_plan returns, and the final cell value."""
    cur = init
    out: list[int | None] = [None]  # the initial atomic_set
    binary = {"and": int.__and__, "or": int.__or__, "xor": int.__xor__}
    for op, value, compare in plan:
        base = op.removeprefix("fetch_")
        fetching = op.startswith("fetch") or op in ("swap", "compare_swap")
        out.append(cur if fetching else None)
        if op == "fetch":
            continue
        if op in ("set", "swap"):
            cur = value
        elif op == "compare_swap":
            cur = value if cur == compare else cur
        elif base == "add":
            cur = wrap(cur + value, name)
        elif base == "inc":
            cur = wrap(cur + 1, name)
        else:
            cur = wrap(binary[base](cur, value), name)
    return out, cur


def expected_signals(messages: list[tuple[int, str, int]], initial: int) -> list[int]:
    seq, cur = [], initial
    for i, (_, op, raw) in enumerate(messages):
        cur = signal_value(i, op, raw) if op == "set" else (cur + raw) % (1 << 64)
        seq.append(cur)
    return seq


def remote_of(rank: int, nranks: int, node_of: Callable[[int], int]) -> list[int]:
    return [pe for pe in range(nranks) if node_of(pe) != node_of(rank)]


def check_layout(
    results: list[dict[str, Any]], node_of: Callable[[int], int], conduit: str, ip: str = r"127\.0\.0\.1"
) -> None:
    """ip: a regular expression of the address every tcp endpoint must have; a ucx endpoint names
    its worker and the UCX transports of its endpoints, which over the libucx wheel's UCX in error
    mode PEER are tcp ones (on the interface MORI_SOCKET_IFNAME names, loopback by default)."""
    nranks = len(results)
    endpoint_pattern = rf"{ip}:\d+" if conduit == "tcp" else r"ucx:[0-9a-f]+ (\w+/[\w.:-]+)(\+\w+/[\w.:-]+)*"
    for rank, r in enumerate(results):
        lay = r["layout"]
        assert lay["conduit"] == conduit, f"rank {rank}: the remote transport runs over {lay['conduit']}"
        expect = ["self" if pe == rank else "p2p" if node_of(pe) == node_of(rank) else "remote" for pe in range(nranks)]
        assert lay["transports"] == expect, f"rank {rank}"
        for pe, ptr in enumerate(lay["ptrs"]):
            if expect[pe] == "remote":
                assert ptr == 0, f"rank {rank}: shmem_ptr_p2p of remote PE {pe} is {ptr:#x}"
            elif expect[pe] == "self":
                assert ptr == lay["probe"]
            else:
                assert ptr != 0, f"rank {rank}: shmem_ptr_p2p of node-mate {pe} is 0"
        assert lay["endpoint"] is not None and re.fullmatch(endpoint_pattern, lay["endpoint"]), lay["endpoint"]
    assert len({r["layout"]["endpoint"].split()[0] for r in results}) == nranks, "two PEs share an endpoint"


def check_put_get(results: list[dict[str, Any]], node_of: Callable[[int], int], ncases: int) -> None:
    nranks = len(results)
    for rank, r in enumerate(results):
        assert r["failures"] == [], f"rank {rank}: {r['failures'][:10]}"
        assert r["checked_peers"] == remote_of(rank, nranks, node_of)
        assert r["cases"] == ncases


def check_everything(
    results: list[dict[str, Any]],
    node_of: Callable[[int], int],
    contended: int,
    conduit: str,
    ip: str = r"127\.0\.0\.1",
) -> None:
    nranks = len(results)
    check_layout(results, node_of, conduit, ip)
    check_put_get([r["put_get"] for r in results], node_of, len(FIXED_CASES))
    signals = expected_signals(MESSAGES, (1 << 64) - 5)
    plans = atomic_plans()
    for rank, r in enumerate(results):
        peers = remote_of(rank, nranks, node_of)
        ps = r["put_signal"]
        assert ps["failures"] == [], f"rank {rank}: {ps['failures']}"
        assert ps["observed"] == {src: signals for src in peers}, f"rank {rank}"
        assert ps["fetched"] == ps["observed"], f"rank {rank}"

        so = r["signal_ops"]
        assert so["total"] == ((1 << 64) - 3000 + sum(1000 + s for s in peers)) % (1 << 64), f"rank {rank}"
        assert so["set"] == {src: 0xFEED_0000_0000 + src * 0x101 + rank for src in peers}, f"rank {rank}"
        assert so["untouched"] == [0] * (nranks - len(peers)), f"rank {rank}"

        for name, plan in plans.items():
            a = r["atomics"][name]
            ctx = f"rank {rank} {name}"
            for pe in peers:
                calls, _ = simulate(plan, wrap(plan_init(name, rank, pe), name), name)
                assert a["per_peer"][pe] == calls, f"{ctx}: atomics on PE {pe}"
            for src in peers:
                _, final = simulate(plan, wrap(plan_init(name, src, rank), name), name)
                assert a["cells_seen_by_owner"][src] == final, f"{ctx}: cell of PE {src}"
            assert a["untouched"] == [0] * (nranks - len(peers)), ctx
            assert a["sentinels"] == [wrap(0x5A5A5A5A5A5A5A5A, name)] * 6, ctx
            olds = a["contended_olds"]
            steps = [wrap(b - a_, name) for a_, b in itertools.pairwise(olds)]
            assert all(s > 0 and s % 3 == 0 for s in steps), f"{ctx}: fetch_add olds {olds}"

        assert r["ordering"]["failures"] == [], f"rank {rank}: {r['ordering']['failures']}"
        assert r["barrier"]["failures"] == [], f"rank {rank}: {r['barrier']['failures']}"

    for name in plans:
        lo, hi = int(np.iinfo(name).min), int(np.iinfo(name).max)
        add_final, fadd_final = results[0]["atomics"][name]["contended_final"]
        assert add_final == wrap(hi - 7 + contended * sum(r + 1 for r in range(nranks)), name), name
        init = lo + 11 if lo < 0 else hi - 11
        assert fadd_final == wrap(init + 3 * nranks * contended, name), name
        olds = Counter(v for r in results for v in r["atomics"][name]["contended_olds"])
        assert olds == Counter(wrap(init + 3 * k, name) for k in range(nranks * contended)), name


# ----------------------------------------------------------------------------- every call, every layout


@pytest.mark.timeout(120)
@pytest.mark.parametrize("conduit", CONDUITS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_call_across_nodes(layout: str, conduit: str) -> None:
    nranks, env, node_of = LAYOUTS[layout]
    contended = 5
    t0 = time.monotonic()
    results = run_pes(
        remote_programs.everything,
        nranks,
        FIXED_CASES,
        MESSAGES,
        atomic_plans(),
        contended,
        env=conduit_env(conduit, env),
        timeout=100,
    )
    check_everything(results, node_of, contended, conduit)
    endpoint = results[0]["layout"]["endpoint"]
    print(f"{layout} over {conduit} ({endpoint}): {time.monotonic() - t0:.1f} s; in PE 0: {results[0]['seconds']}")


size_strategy = st.one_of(
    st.integers(min_value=1, max_value=4096),
    st.integers(min_value=4097, max_value=256 << 10),
    st.integers(min_value=MiB - 64, max_value=3 * MiB),
)
case_strategy = st.tuples(size_strategy, st.integers(0, 4095), st.integers(0, 4095))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("conduit", CONDUITS)
@settings(max_examples=3, deadline=None)
@given(cases=st.lists(case_strategy, min_size=1, max_size=6))
def test_put_get_hypothesis_sizes(conduit: str, cases: list[tuple[int, int, int]]) -> None:
    nranks, env, node_of = LAYOUTS["4pe-2-nodes-serve-spin"]
    results = run_pes(remote_programs.put_get, nranks, cases, env=conduit_env(conduit, env), timeout=60)
    check_layout([{"layout": r["layout"]} for r in results], node_of, conduit)
    check_put_get(results, node_of, len(cases))


# ----------------------------------------------------------------------------- conduit selection


@pytest.mark.parametrize("conduit", CONDUITS)
def test_ucx_atomics_mode_needs_nic_atomics(conduit: str, tmp_path: Path) -> None:
    """MORI_SHMEM_UCX_ATOMICS=ucx sends atomics through ucp_atomic_op_nbx, which UCX (error mode
    PEER) can only do with NIC atomics; the libucx wheel's UCX has none (no verbs), so init must
    refuse it on every PE with ConfigError rather than let the first atomic fail. The tcp conduit
    ignores the setting."""
    env = conduit_env(conduit, {**TWO_NODES, "MORI_SHMEM_UCX_ATOMICS": "ucx"})
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60, return_exceptions=True)
    for rank, r in enumerate(results):
        assert not isinstance(r, RankError), f"rank {rank}: {r}"
        if conduit == "tcp":
            assert r["error"] is None and r["conduit"] == "tcp", r
            continue
        assert r["error"] is not None and r["error"]["type"] == "ConfigError", r["error"]
        assert "NIC atomics" in r["error"]["message"] and "MORI_SHMEM_UCX_ATOMICS=am" in r["error"]["message"]


TWO_NODES = {"MORI_DISABLE_P2P": "1"}
# The tests of mori's own wire protocol and server threads.
TCP_TWO_NODES = conduit_env("tcp", TWO_NODES)

_FALLBACK = re.compile(r"mori\.shmem INFO: PE (\d+): remote transport: TCP, because UCX is not usable on PE 0: (.*)")


@pytest.mark.parametrize("ucx", ["wheel", "empty-dir"])
def test_auto_takes_ucx_when_it_loads_else_tcp_with_a_log_line(ucx: str, tmp_path: Path) -> None:
    """MORI_SHMEM_REMOTE_CONDUIT=auto (the default): UCX when every PE opens it, else TCP and one
    INFO line per PE saying why; data and atomics cross either way."""
    if ucx == "wheel" and libucx_wheel_dir() is None:
        pytest.skip("the libucx wheel (libucx-cu12) is not installed")
    empty = tmp_path / "no-ucx-here"
    empty.mkdir()
    env: dict[str, str | None] = {**TWO_NODES, "MORI_SHMEM_REMOTE_CONDUIT": None, "MORI_LOG_LEVEL": "info"}
    env["MORI_SHMEM_UCX_DIR"] = str(empty) if ucx == "empty-dir" else None
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
    for rank, r in enumerate(results):
        assert r["error"] is None, f"rank {rank}: {r['error']}"
        assert r["transport"] == "remote"
        assert r["received"] == 0x5EED_0000 + (1 - rank), f"rank {rank}: {r['received']:#x}"
        # Its fetch_add hit the peer's word, which holds what this PE put there.
        assert r["fetched"] == 0x5EED_0000 + rank, f"rank {rank}: {r['fetched']:#x}"
        fallbacks = [m for m in map(_FALLBACK.fullmatch, r["log"]) if m is not None]
        if ucx == "wheel":
            assert r["conduit"] == "ucx", r
            assert fallbacks == [], r["log"]
            assert any("remote transport: UCX 1.22" in line for line in r["log"]), r["log"]
        else:
            assert r["conduit"] == "tcp", r
            assert len(fallbacks) == 1, r["log"]
            assert fallbacks[0].group(1) == str(rank)
            assert fallbacks[0].group(2) == f"no libucs.so or libucs.so.0 in {empty}", fallbacks[0].group(2)


@pytest.mark.parametrize("conduit", CONDUITS)
def test_num_qp_per_pe_is_the_connections_to_each_remote_pe(conduit: str, tmp_path: Path) -> None:
    """MORI's shmem_num_qp_per_pe: the tcp conduit's streams per remote PE, the ucx conduit's one
    endpoint per PE."""
    env = conduit_env(conduit, {**TWO_NODES, "MORI_SHMEM_REMOTE_STREAMS": "3"})
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
    for rank, r in enumerate(results):
        assert r["error"] is None, f"rank {rank}: {r['error']}"
        assert r["conduit"] == conduit
        assert r["num_qp_per_pe"] == (3 if conduit == "tcp" else 1), r


@pytest.mark.parametrize(
    ("settings", "streams"),
    [({"MORI_NUM_QP_PER_PE": "3"}, 3), ({"MORI_NUM_QP_PER_PE": "3", "MORI_SHMEM_REMOTE_STREAMS": "1"}, 1)],
)
def test_moris_num_qp_per_pe_sets_the_tcp_streams(settings: dict[str, str], streams: int, tmp_path: Path) -> None:
    """MORI's MORI_NUM_QP_PER_PE takes effect with the tcp conduit: the connections it opens to each
    remote PE (init's log says how many), unless mori's own MORI_SHMEM_REMOTE_STREAMS is set."""
    env = conduit_env("tcp", {**TWO_NODES, "MORI_LOG_LEVEL": "info", **settings})
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
    for rank, r in enumerate(results):
        assert r["error"] is None, f"rank {rank}: {r['error']}"
        assert r["num_qp_per_pe"] == streams, r
        assert any(f"{streams} TCP stream(s) per remote PE" in line for line in r["log"]), r["log"]
        assert r["received"] == 0x5EED_0000 + 1 - rank


@pytest.mark.parametrize(
    ("name", "value", "limit"),
    [("MORI_NUM_QP_PER_PE", "65", "[1, 64]"), ("MORI_SHMEM_REMOTE_SERVE_SPIN_US", "1001", "[0, 1000]")],
)
def test_conduit_setting_out_of_range_is_refused_naming_it(name: str, value: str, limit: str, tmp_path: Path) -> None:
    env = conduit_env("tcp", {**TWO_NODES, name: value})
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
    for r in results:
        assert r["error"] is not None and r["error"]["type"] == "ConfigError", r
        assert f"{name}={value}" in r["error"]["message"] and limit in r["error"]["message"], r


@pytest.mark.skipif(not _ucx_findable(), reason="no UCX (pip install libucx-cu12)")
def test_rdma_devices_reach_the_ucx_conduit(tmp_path: Path) -> None:
    """MORI_RDMA_DEVICES narrows the devices init hands UCX; a name that matches no device here is
    named in a warning (MORI skips it silently) and the job still runs over what is left."""
    if Path("/sys/class/infiniband").exists():
        pytest.skip("this host has RDMA devices; the expected device list below assumes none")
    env = {**conduit_env("ucx", TWO_NODES), "MORI_RDMA_DEVICES": "nonexistent_nic0", "MORI_LOG_LEVEL": "info"}
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
    for rank, r in enumerate(results):
        assert r["error"] is None, f"rank {rank}: {r['error']}"
        assert r["received"] == 0x5EED_0000 + (1 - rank)
        log = "\n".join(r["log"])
        assert f"PE {rank}: MORI_RDMA_DEVICES=nonexistent_nic0: no RDMA device or port nonexistent_nic0 here" in log
        assert f"PE {rank}: MORI_RDMA_DEVICES=nonexistent_nic0: UCX may use lo\n" in log + "\n", log


def test_ucx_asked_for_but_absent_fails_init_on_every_pe(tmp_path: Path) -> None:
    env = {**conduit_env("ucx", TWO_NODES), "MORI_SHMEM_UCX_DIR": str(tmp_path)}
    results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
    for rank, r in enumerate(results):
        err = r["error"]
        assert err is not None and err["type"] == "UnsupportedError", f"rank {rank}: {err}"
        assert "MORI_SHMEM_REMOTE_CONDUIT=ucx, but UCX is not usable on PE 0" in err["message"], err["message"]
        assert str(tmp_path) in err["message"], err["message"]


# ----------------------------------------------------------------------------- intruders


def test_connections_without_the_secret_are_refused() -> None:
    results = run_pes(remote_programs.intruders, 2, env=TCP_TWO_NODES, timeout=60)
    r0, r1 = results
    assert r0["transport"] == r1["transport"] == "remote"
    for probe in ("wrong_mac", "wrong_secret", "wrong_target", "wrong_version", "garbage"):
        assert r0[probe] == {"status": 7, "after": "eof"}, f"{probe}: {r0[probe]}"
    # The control: the same client with the job secret is welcomed, its put lands, and a request
    # outside the heap gets it dropped without writing anything.
    assert r0["right_secret"] == {"status": 0, "after": "welcomed"}
    assert r0["authenticated"] == {"welcome": 0, "flush": 0, "after_bad_put": "eof"}
    assert r1["forged_seen"] == b"forged!!"
    # A put-with-signal's parts: the signal with the last part only; a join of one part is refused.
    assert r0["join"] == [0, 42], r0["join"]
    assert r0["join_of_one"] == "eof"
    assert r1["joined_seen"] == b"part onepart two" + bytes(8)
    assert r1["tail_after"] == r1["tail_before"]
    # Silent clients are kept waiting (not answered, not blocking anyone) ...
    assert r0["silent_before"] == ["open"] * 3
    # ... and the PEs still work in both directions.
    for rank, r in enumerate(results):
        assert r["put_after"] and r["get_after"], f"rank {rank}: {r}"
    assert sorted([r0["fetch_add_after"], r1["fetch_add_after"]]) == [1, 1]
    assert r0["finalize_s"] < 5 and r1["finalize_s"] < 5, (r0["finalize_s"], r1["finalize_s"])


def test_silent_client_does_not_delay_finalize() -> None:
    """A client that connects to a PE's server and never sends its Hello must not hold up that PE's
    finalize (the server waits up to 30 s for a Hello)."""
    hold_s = 6.0
    results = run_pes(remote_programs.silent_client_at_finalize, 2, hold_s, env=TCP_TWO_NODES, timeout=60)
    assert results[1]["finalize_s"] < hold_s / 2, f"PE 1's finalize took {results[1]['finalize_s']:.1f} s"


@pytest.mark.timeout(90)
def test_a_flood_of_unauthenticated_connections_leaves_nothing_behind() -> None:
    """100 refused handshakes and 100 silent connections (more than the 64 handshake slots) cost
    PE 1's server no thread and no memory map; a client with the secret is still welcomed while
    they are held, and once they are closed the descriptors are back."""
    refused, silent = 100, 100
    results = run_pes(remote_programs.conduit_flood, 2, refused, silent, env=TCP_TWO_NODES, timeout=75)
    attacker, server = results
    assert attacker["refused"] == [remote_programs.STATUS_AUTH] * refused
    assert attacker["welcomed"] == {"status": 0, "after": "welcomed"}
    assert attacker["welcome_s"] < 5.0, f"welcomed after {attacker['welcome_s']:.1f} s"
    before, during, after = server["before"], server["during"], server["after"]
    assert during["threads"] == before["threads"], (before, during)
    assert during["maps"] <= before["maps"] + 8, (before, during)
    assert during["fds"] <= before["fds"] + 64 + 4, (before, during)  # the handshake slots, no more
    assert after["threads"] == before["threads"], (before, after)
    assert after["maps"] <= before["maps"] + 8, (before, after)
    assert after["fds"] <= before["fds"] + 2, (before, after)
    assert attacker["put_after"] and server["put_after"]


# ----------------------------------------------------------------------------- failures

DEATH_TIMEOUT_S = 2


@pytest.mark.timeout(90)
@pytest.mark.parametrize("conduit", CONDUITS)
@pytest.mark.parametrize(
    ("op", "how"),
    [("put", "exit"), ("get", "exit"), ("put_signal", "exit"), ("atomic", "exit"), ("put", "stop")],
)
def test_peer_lost_mid_transfer(op: str, how: str, conduit: str) -> None:
    env = conduit_env(conduit, {**TWO_NODES, "MORI_SHMEM_WAIT_TIMEOUT": str(DEATH_TIMEOUT_S)})
    t0 = time.monotonic()
    survivor, victim = run_pes(remote_programs.peer_dies, 2, op, how, env=env, timeout=60, return_exceptions=True)
    total = time.monotonic() - t0
    assert isinstance(victim, RankError) and victim.type_name == "ProcessDied", victim
    assert not isinstance(survivor, RankError), f"the survivor failed itself: {survivor}"
    err = survivor["error"]
    assert err is not None, f"{op} to a {how} peer kept succeeding ({survivor['iterations']} iterations)"
    assert "MoriShmemError" in err["mro"], err
    if how == "exit":
        assert err["type"] == "PeerLostError" or "TimeoutError" in err["mro"], err
        assert survivor["elapsed"] < DEATH_TIMEOUT_S + 2, survivor
    else:
        assert "TimeoutError" in err["mro"], err
        assert DEATH_TIMEOUT_S - 1 < survivor["elapsed"] < 2 * DEATH_TIMEOUT_S + 2, survivor
    # Later calls towards the lost peer fail too, without hanging.
    again = survivor["again"]
    assert again is not None and "MoriShmemError" in again["mro"], again
    assert total < 30, f"the job took {total:.1f} s"


@pytest.mark.parametrize("conduit", CONDUITS)
@pytest.mark.parametrize("what", ["get", "fetch"])
def test_late_answer_is_not_taken_for_the_next_call(what: str, conduit: str) -> None:
    """After a get or a fetching atomic timed out (the peer is stopped), the peer's late answer must
    not be returned as the answer of the next call on that connection."""
    env = conduit_env(conduit, {**TWO_NODES, "MORI_SHMEM_REMOTE_STREAMS": "1", "MORI_SHMEM_WAIT_TIMEOUT": "1"})
    r0, _ = run_pes(remote_programs.late_answer, 2, what, env=env, timeout=60, return_exceptions=True)
    assert not isinstance(r0, RankError), r0
    assert r0["first"] is not None and "TimeoutError" in r0["first"]["mro"], r0["first"]
    second = r0["second"]
    assert second == "right" or (isinstance(second, dict) and "MoriShmemError" in second["mro"]), (
        f"{what} after a timed-out {what}: {second}"
    )


# ----------------------------------------------------------------------------- network namespaces

LAUNCHER = (
    "import sys; sys.path.insert(0, sys.argv[1]); import remote_programs; "
    "remote_programs.netns_main(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])"
)
UID_MAKER = "import sys, mori.shmem as s; open(sys.argv[1], 'wb').write(s.shmem_get_unique_id())"


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")


@contextlib.contextmanager
def two_namespaces() -> Iterator[list[tuple[str, str, str]]]:
    """Two network namespaces joined by a veth pair: [(namespace, interface, address)] x 2.
    Skips when the machine does not allow it; always removes what it made."""
    if sys.platform != "linux":
        pytest.skip("network namespaces need Linux")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) is not installed")
    tag = os.getpid() % 100000
    subnet = f"10.{200 + tag % 50}.{tag % 250}"
    nodes = [(f"mori-rt-{tag}-{s}", f"mrt{tag}{s}", f"{subnet}.{i + 1}") for i, s in enumerate("ab")]
    made: list[str] = []
    try:
        try:
            for ns, _, _ in nodes:
                _ip("netns", "add", ns)
                made.append(ns)
            _ip("link", "add", nodes[0][1], "type", "veth", "peer", "name", nodes[1][1])
            for ns, ifname, addr in nodes:
                _ip("link", "set", ifname, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", ifname)
                _ip("-n", ns, "link", "set", ifname, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            # `ip netns exec` also needs a private mount of /sys, which some containers refuse.
            _ip("netns", "exec", nodes[0][0], "ip", "-4", "addr", "show", "dev", nodes[0][1])
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            pytest.skip(f"cannot build network namespaces here: {exc}")
        yield nodes
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("conduit", CONDUITS)
def test_two_network_namespaces(tmp_path: Path, conduit: str) -> None:
    nranks, per_ns = 4, 2
    with two_namespaces() as nodes:
        ns_a, if_a, _ = nodes[0]
        base_env = {k: v for k, v in os.environ.items() if not k.startswith(("MORI_SHMEM_PES", "MORI_DISABLE"))}
        uid_path = tmp_path / "uid"
        subprocess.run(
            ["ip", "netns", "exec", ns_a, sys.executable, "-c", UID_MAKER, str(uid_path)],
            env={**base_env, "MORI_SOCKET_IFNAME": if_a},
            check=True,
            timeout=60,
        )
        assert len(uid_path.read_bytes()) == 128
        procs = []
        try:
            for rank in range(nranks):
                ns, ifname, _ = nodes[rank // per_ns]
                env = {**conduit_env(conduit, base_env), "MORI_SOCKET_IFNAME": ifname, "MORI_NODE_ID": ns}
                argv = [sys.executable, "-c", LAUNCHER, str(TESTS_DIR), str(rank), str(nranks), str(uid_path)]
                argv.append(str(tmp_path / f"rank{rank}.pkl"))
                log = open(tmp_path / f"rank{rank}.log", "wb")  # noqa: SIM115 (closed below)
                procs.append(
                    (subprocess.Popen(["ip", "netns", "exec", ns, *argv], env=env, stdout=log, stderr=log), log)
                )
            deadline = time.monotonic() + 120
            for proc, _ in procs:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            for proc, log in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
        outcomes = []
        for rank in range(nranks):
            path = tmp_path / f"rank{rank}.pkl"
            log = (tmp_path / f"rank{rank}.log").read_text(errors="replace")[-3000:]
            assert path.exists(), f"rank {rank} wrote no result (exit {procs[rank][0].returncode}):\n{log}"
            status, value = pickle.loads(path.read_bytes())
            assert status == "ok", f"rank {rank}: {value}\n{log}"
            outcomes.append(value)
    for rank, r in enumerate(outcomes):
        _, ifname, addr = nodes[rank // per_ns]
        endpoint = r["layout"]["endpoint"]
        # UCX's tcp lanes run on the veth interface (UCX_NET_DEVICES follows MORI_SOCKET_IFNAME).
        assert endpoint.startswith(f"{addr}:") if conduit == "tcp" else f"tcp/{ifname}" in endpoint, (rank, endpoint)
    check_everything(outcomes, lambda r: r // per_ns, remote_programs.netns_plan()[3], conduit, r"10\.\d+\.\d+\.\d+")


def test_mori_global_log_level_sets_the_native_threshold(tmp_path: Path) -> None:
    """MORI's MORI_GLOBAL_LOG_LEVEL (spdlog names) reaches the native log when MORI_LOG_LEVEL is unset."""
    if libucx_wheel_dir() is None:
        pytest.skip("the libucx wheel (libucx-cu12) is not installed")
    for level, shown in (("info", True), ("warn", False)):
        env: dict[str, str | None] = {
            **TWO_NODES,
            "MORI_SHMEM_REMOTE_CONDUIT": None,
            "MORI_LOG_LEVEL": None,
            "MORI_GLOBAL_LOG_LEVEL": level,
        }
        results = run_pes(remote_programs.conduit_choice, 2, str(tmp_path), env=env, timeout=60)
        for rank, r in enumerate(results):
            assert r["error"] is None, f"rank {rank}: {r['error']}"
            assert any("remote transport: UCX" in line for line in r["log"]) == shown, (level, r["log"])
