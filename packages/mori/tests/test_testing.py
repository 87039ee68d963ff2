# SPDX-License-Identifier: MIT
"""mori.testing: real processes (2, 4 and 8 PEs; forked from the fork server under this plugin,
spawned where the environment or the output asks for it), real failures (an exception, a process
that dies, one that hangs), each reported with the rank and the end of its output, in bounded time;
the environment a PE sees from its first import on; and the pytest plugin's deadline and per-PE
report sections, run in a pytest of its own."""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path

import launcher_programs as programs
import pytest

from mori.testing import PeerError, PeerProcess, PeFailure, RankError, find_free_port, run_commands, run_processes

pytest_plugins = ["pytester"]


def _port_base(nranks: int) -> int:
    """A run of nranks consecutive free loopback ports (re-checked one by one)."""
    for _ in range(50):
        base = find_free_port()
        if base + nranks < 65536 and all(_free(base + i) for i in range(nranks)):
            return base
    raise RuntimeError("no run of free loopback ports")


def _free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_every_pe_runs_as_its_own_process_and_returns_its_result(nranks: int) -> None:
    results = run_processes(programs.ring_sum, nranks, _port_base(nranks), timeout=120)
    assert results == [rank + (rank - 1) % nranks for rank in range(nranks)]


def test_a_raising_pe_is_named_with_its_traceback_and_output_and_the_others_are_killed() -> None:
    start = time.monotonic()
    with pytest.raises(PeFailure) as info:
        run_processes(programs.fail_on, 4, 2, timeout=120, failure_grace=1)
    assert time.monotonic() - start < 60  # the grace, not the timeout, ended the others
    failure = info.value
    assert failure.failed_ranks == [0, 1, 2, 3]
    bad = failure.outcomes[2]
    assert isinstance(bad, RankError) and bad.is_a("ValueError") and "told to fail" in bad.message
    assert "rank 2 says hello" in bad.log
    assert all(failure.outcomes[r].type_name == "Timeout" for r in (0, 1, 3))
    assert "--- rank 2: ValueError: rank 2 was told to fail" in str(failure)
    assert "rank 2's output (end):\nrank 2 says hello" in str(failure)


def test_a_pe_that_dies_without_reporting_is_an_error_not_a_hang() -> None:
    start = time.monotonic()
    outcomes = run_processes(programs.die_on, 2, 1, timeout=8, return_exceptions=True)
    assert time.monotonic() - start < 30
    died = outcomes[1]
    assert isinstance(died, RankError) and died.type_name == "ProcessDied" and died.exitcode == 7
    assert "dying without a word" in died.log
    assert outcomes[0].type_name == "Timeout"  # with return_exceptions every rank gets the full timeout


def test_a_hung_pe_is_killed_at_the_timeout_with_its_stack_in_its_log() -> None:
    start = time.monotonic()
    with pytest.raises(PeFailure) as info:
        run_processes(programs.hang, 2, timeout=5)
    assert time.monotonic() - start < 20
    for outcome in info.value.outcomes:
        assert outcome.type_name == "Timeout" and outcome.exitcode == -9
        assert "hangs" in outcome.log and "in hang" in outcome.log  # faulthandler's dump before the kill
    outcomes = run_processes(programs.hang, 2, False, timeout=4, return_exceptions=True)
    assert outcomes[0] is None and outcomes[1].type_name == "Timeout"


def test_outside_capture_a_pe_prints_where_the_caller_prints(capfd) -> None:
    outcomes = run_processes(programs.die_on, 2, 1, timeout=8, return_exceptions=True, capture_output=False)
    assert outcomes[1].type_name == "ProcessDied" and outcomes[1].log == ""
    assert "dying without a word to the launcher" in capfd.readouterr().out


def test_a_launch_that_cannot_run_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="nranks must be >= 1, got 0"):
        run_processes(programs.hang, 0)
    with pytest.raises(ValueError, match="timeout must be > 0 seconds, got -1"):
        run_commands([["true"]], timeout=-1)


def test_commands_run_as_ranks_and_a_failing_one_is_reported_with_its_stderr() -> None:
    script = "import sys; r = int(sys.argv[1]); print('out', r * r); print('err', r, file=sys.stderr)"
    results = run_commands([[sys.executable, "-c", script, str(r)] for r in range(4)], timeout=60)
    assert [r.stdout for r in results] == [f"out {r * r}\n" for r in range(4)]
    assert [r.stderr for r in results] == [f"err {r}\n" for r in range(4)]
    failing = "import sys; print('bad input', file=sys.stderr); sys.exit(3)"
    with pytest.raises(PeFailure) as info:
        run_commands([[sys.executable, "-c", failing], ["sleep", "300"]], timeout=60, failure_grace=1)
    first, second = info.value.outcomes
    assert first.type_name == "ExitStatus" and first.exitcode == 3 and "bad input" in first.log
    assert second.type_name == "Timeout"


def test_a_peer_answers_over_its_pipe_and_a_dead_or_mute_one_is_an_error() -> None:
    with PeerProcess(programs.echo_peer, "hi", factor=3, name="echo") as peer:
        assert peer.recv(60, what="its start") == ("ready", "hi")
        assert peer.ask("times", 14) == 42
        with pytest.raises(PeerError, match=r"peer echo \(pid \d+, exited with code 9\) closed its pipe"):
            peer.ask("die")
    with PeerProcess(programs.echo_peer, "hi", name="mute") as peer:
        peer.recv(60)
        start = time.monotonic()
        with pytest.raises(PeerError, match=r"did not send an answer to 'mute' within 1\.0 s") as info:
            peer.ask("mute", timeout=1)
        assert time.monotonic() - start < 10
        assert "peer started" in str(info.value) and not peer.is_alive()  # killed, its log quoted
    with PeerProcess(programs.echo_peer, "bye") as peer:
        peer.recv(60)
        peer.close("exit")
        assert peer.proc.exitcode == 0


ENV_PROBES = [
    "MORI_TESTING_SET",
    "MORI_TESTING_UNSET",
    "MORI_TESTING_PARENT",
    "MORI_LOG_LEVEL",
    "JAX_PLATFORMS",
    "OMP_NUM_THREADS",
]


def _launch_environment(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The env of a launch, and what its PEs must see: env over this process's environment (changed
    after the fork server started: the server's own environment must not leak through)."""
    monkeypatch.setenv("MORI_TESTING_UNSET", "set in the parent")
    monkeypatch.setenv("MORI_TESTING_PARENT", "set in the parent")
    env: dict[str, str | None] = {
        "MORI_TESTING_SET": "set by env",
        "MORI_TESTING_UNSET": None,
        "MORI_LOG_LEVEL": "ERROR",
        "JAX_PLATFORMS": "cpu",  # read by jax alone, which the fork server never imports
    }
    expected = {name: os.environ.get(name) for name in ENV_PROBES}
    expected.update(env)
    return env, expected


def _assert_seen_from_import_on(report: dict, expected: dict[str, str | None]) -> None:
    assert report["at_import"] == expected and report["now"] == expected
    assert report["mori_level"] == logging.ERROR  # set by `import mori` from MORI_LOG_LEVEL


def test_a_pe_sees_env_and_the_launchers_environment_from_its_first_import_on(monkeypatch) -> None:
    run_processes(programs.ring_sum, 2, _port_base(2), timeout=120)  # the fork server runs already
    env, expected = _launch_environment(monkeypatch)
    forked = run_processes(programs.environment, 2, ENV_PROBES, env=env, timeout=120)
    # OMP_NUM_THREADS may be read when the fork server imports numpy or torch: spawned, as before.
    expected_spawned = {**expected, "OMP_NUM_THREADS": "3"}
    spawned = run_processes(programs.environment, 2, ENV_PROBES, env={**env, "OMP_NUM_THREADS": "3"}, timeout=120)
    for report in forked:
        _assert_seen_from_import_on(report, expected)
        assert report["ppid"] != os.getpid()  # forked by the fork server, not by this process
    for report in spawned:
        _assert_seen_from_import_on(report, expected_spawned)
        assert report["ppid"] == os.getpid()
    assert len({report["pid"] for report in forked + spawned}) == 4
    assert os.environ.get("MORI_TESTING_SET") is None and os.environ["MORI_TESTING_UNSET"] == "set in the parent"


def test_a_pe_printing_where_the_caller_prints_is_spawned(monkeypatch) -> None:
    env, expected = _launch_environment(monkeypatch)
    (report,) = run_processes(programs.environment, 1, ENV_PROBES, env=env, timeout=120, capture_output=False)
    _assert_seen_from_import_on(report, expected)
    assert report["ppid"] == os.getpid()


def test_a_peer_sees_env_from_its_first_import_on(monkeypatch) -> None:
    env, expected = _launch_environment(monkeypatch)
    with PeerProcess(programs.environment_peer, ENV_PROBES, env=env) as peer:
        report = peer.recv(60, what="its report")
    _assert_seen_from_import_on(report, expected)
    assert report["ppid"] != os.getpid()


PLUGGED_CONFTEST = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
pytest_plugins = ["mori.testing.pytest_plugin"]

def pytest_mori_default_timeout(config):
    return 12
"""

PLUGGED_TESTS = """
import launcher_programs as programs
import pytest
from mori.testing import run_processes

def test_hangs():
    run_processes(programs.hang, 2, timeout=600)

def test_fails_after_its_pes():
    run_processes(programs.ring_sum, 2, {port})
    assert False, "after the PEs"

@pytest.mark.timeout(30)
def test_marked(request):
    assert request.node.get_closest_marker("timeout").args == (30,)

def test_defaulted(request):
    assert request.node.get_closest_marker("gpu") is None
"""


def test_the_plugin_ends_launches_before_the_test_deadline_and_shows_every_pe_output(pytester) -> None:
    pytester.makeconftest(PLUGGED_CONFTEST)
    pytester.makepyfile(PLUGGED_TESTS.replace("{port}", str(_port_base(2))))
    start = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA")
    assert time.monotonic() - start < 120
    result.assert_outcomes(passed=2, failed=2)
    text = result.stdout.str()
    # The launch of test_hangs was cut to 12 - 5 s: killed by the launcher, not by the test timeout.
    assert re.search(r"rank 0 did not finish within [67]\.\d s \(timeout [67]\.\d s\); killed", text), text
    assert "output of PE 1 of run_processes(ring_sum, 2)" in text and "rank 1 of 2 up" in text
    assert "after the PEs" in text


PRELOADING_CONFTEST = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
pytest_plugins = ["mori.testing.pytest_plugin"]

def pytest_mori_preload(config):
    return ["colorsys"]
"""

PRELOADING_TESTS = """
import launcher_programs as programs
import pytest
from mori.testing import run_processes

def test_preloaded():
    assert run_processes(programs.modules_loaded, 2, ["colorsys", "wave"], timeout=60) == [[True, False]] * 2
"""


def test_a_conftest_names_modules_the_fork_server_imports_for_every_pe(pytester) -> None:
    assert run_processes(programs.modules_loaded, 1, ["colorsys"], timeout=60) == [[False]]
    pytester.makeconftest(PRELOADING_CONFTEST)
    pytester.makepyfile(PRELOADING_TESTS)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    pytester.makeconftest(PRELOADING_CONFTEST.replace('"colorsys"', '"mori.shmem"'))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert "pytest_mori_preload named 'mori.shmem'" in result.stdout.str() + result.stderr.str()
