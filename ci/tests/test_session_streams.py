"""NOTE [test streams]: the streams run at once, each one's output printed whole, failures named."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from session_streams import run_streams

# Each "meets" session waits for the other stream's mark: both can end only if they run at once.
NOXFILE = textwrap.dedent(
    """
    import time
    from pathlib import Path

    import nox

    HERE = Path(__file__).parent

    def meet(mine, other):
        (HERE / mine).touch()
        deadline = time.monotonic() + 60
        while not (HERE / other).exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{other} never appeared: the streams did not run at once")
            time.sleep(0.05)

    @nox.session(venv_backend="none")
    def meets_b(session):
        meet("a", "b")
        print("first stream's output")

    @nox.session(venv_backend="none")
    def meets_a(session):
        meet("b", "a")
        print("second stream's output")

    @nox.session(venv_backend="none")
    def fails(session):
        session.error("this one fails")

    @nox.session(venv_backend="none")
    def after_failure(session):
        (HERE / "after").touch()

    @nox.session(venv_backend="none")
    def ok(session):
        print("ok's output")
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "noxfile.py").write_text(NOXFILE)
    return tmp_path


def test_streams_run_at_once_and_print_whole_in_order(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logged: list[str] = []
    assert run_streams([["meets_b"], ["meets_a"]], project, logged.append) == []
    out = capsys.readouterr().out
    first, second = out.index("stream 0 (meets_b): exit 0"), out.index("stream 1 (meets_a): exit 0")
    assert first < out.index("first stream's output") < second < out.index("second stream's output")
    assert logged == ["stream 0: meets_b", "stream 1: meets_a"]


def test_a_failing_stream_names_its_sessions_and_the_others_still_run(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = run_streams([["fails", "after_failure"], ["ok"]], project, lambda _: None)
    assert failed == ["fails", "after_failure"]
    assert (project / "after").exists()  # nox went on to the stream's next session
    out = capsys.readouterr().out
    assert "stream 0 (fails after_failure): exit 1" in out and "this one fails" in out
    assert "stream 1 (ok): exit 0" in out and "ok's output" in out
