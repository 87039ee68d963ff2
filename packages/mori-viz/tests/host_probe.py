# SPDX-License-Identifier: MIT
"""A C program built and run on the host, for the tests that compare what a C compiler sees in
mori-viz's headers with what the Python side says."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def host_compiler() -> str:
    """The host C compiler; skips the test without one."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no host C compiler")
    return compiler


def run_c_probe(workdir: Path, lines: list[str], include: str | Path) -> str:
    """Writes ``lines`` as probe.c in workdir, builds it (C99, -Wall -Werror, ``include`` on the
    include path), runs it and returns what it printed."""
    compiler = host_compiler()
    source, exe = workdir / "probe.c", workdir / "probe"
    source.write_text("\n".join(lines) + "\n")
    build = [compiler, "-std=c99", "-Wall", "-Werror", "-I", str(include), "-o", str(exe), str(source)]
    subprocess.run(build, check=True)
    return subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
