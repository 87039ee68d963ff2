# SPDX-License-Identifier: MIT
"""Fixtures for the root package's tests: fresh interpreters and fresh venvs made from the wheelhouse
(the ``wheelhouse`` fixture, markers and timeouts come from mori.testing.pytest_plugin)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

pytest_plugins = ["mori.testing.pytest_plugin"]

REPO = Path(__file__).resolve().parents[3]


def pytest_mori_default_timeout(config: pytest.Config) -> float:
    return 900  # fresh venvs are built from the wheelhouse with pip (300 s per install at most)


def run_python(python: str | Path, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter; the result keeps stdout and stderr."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MORI_")}
    full_env.update(env or {})
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120, env=full_env)


@pytest.fixture
def fresh_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """This test environment's interpreter, fresh, with no MORI_* variables unless given."""

    def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
        return run_python(sys.executable, code, env)

    return run


def make_venv(directory: Path) -> Path:
    """A new venv with no site packages of its own beyond pip; returns its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(directory)
    return directory / "bin" / "python"


def pip_install_offline(python: Path, wheelhouse: Path, *requirements: str, target: Path | None = None) -> None:
    """pip installs ``requirements`` from the wheelhouse alone (no index): only what the wheels declare."""
    command = [str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse)]
    if target is not None:
        command += ["--no-deps", "--target", str(target)]
    done = subprocess.run([*command, *requirements], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
