"""The CPython interpreters a release is built for, found on this machine (pyenv or PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

#: Every package's ``requires-python`` is ">=3.10"; a release ships a wheel for each of these.
RELEASE_PYTHONS: tuple[str, ...] = ("3.10", "3.11", "3.12", "3.13")


class InterpreterNotFoundError(LookupError):
    """No usable CPython of the asked version on this machine."""


def _candidates(version: str) -> list[Path]:
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    # pyenv's own installs first: its shims answer only for the versions `pyenv global` selects.
    found = sorted(pyenv_root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
    on_path = shutil.which(f"python{version}")
    return [*found, *([Path(on_path)] if on_path else [])]


def find_python(version: str) -> Path:
    """The path of a working ``python<version>`` (e.g. "3.12"), or InterpreterNotFoundError."""
    if version not in RELEASE_PYTHONS:
        raise InterpreterNotFoundError(f"python {version!r} is not a release Python; expected one of {RELEASE_PYTHONS}")
    for path in _candidates(version):
        probe = subprocess.run(
            [str(path), "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return path
    raise InterpreterNotFoundError(
        f"no CPython {version} found (looked under $PYENV_ROOT/versions/{version}.* and for python{version} on PATH)"
    )
