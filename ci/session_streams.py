"""NOTE [test streams]: the packages' test sessions run as two nox processes at once.

Measured on the 2-core CI machine, a test session keeps about a quarter of its cores busy
(`nox -s test-umbp`: 63 s of CPU in 122 s; `.ci/run` 2026-12-08): its multi-PE tests spend their
time in rendezvous, timeouts that a test of failure waits out, and peers' sockets. Run one after
another the eight sessions took 16-17 of CI's 32-34 minutes; as two streams they take 11-12, and
the whole clean-clone CI 23.6 minutes (38c9cdb). Each stream is one ``nox -s`` over
its sessions, which run in turn as before; the wheels are built before the streams start, so a
stream's build sessions find them current and write nothing, and no two streams share a venv.

A stream's output is kept in a file and printed whole once it ends (interleaved lines of two
pytest runs would be unreadable), the streams in the order given.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


def run_streams(streams: Sequence[Sequence[str]], root: Path, log: Callable[[str], None]) -> list[str]:
    """Runs each list of nox sessions in ``streams`` as one ``nox -s`` process, all at once; prints
    each one's output when all have ended; returns the sessions of the streams that failed."""
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mori-test-streams-") as folder:
        runs: list[tuple[Sequence[str], Path, subprocess.Popen[bytes]]] = []
        try:
            for number, sessions in enumerate(streams):
                output = Path(folder) / f"stream-{number}.log"
                command = [sys.executable, "-m", "nox", "-f", str(root / "noxfile.py"), "-s", *sessions]
                with open(output, "wb") as sink:
                    process = subprocess.Popen(command, cwd=root, stdout=sink, stderr=subprocess.STDOUT)
                runs.append((sessions, output, process))
                log(f"stream {number}: {' '.join(sessions)}")
            for _, _, process in runs:
                process.wait()
        finally:
            for _, _, process in runs:  # interrupted: no stream outlives the session
                if process.poll() is None:
                    process.kill()
                    process.wait()
        for number, (sessions, output, process) in enumerate(runs):
            sys.stdout.write(f"\n===== stream {number} ({' '.join(sessions)}): exit {process.returncode} =====\n")
            sys.stdout.write(output.read_text(errors="replace"))
            sys.stdout.flush()
            if process.returncode != 0:
                failed.extend(sessions)
    return failed
