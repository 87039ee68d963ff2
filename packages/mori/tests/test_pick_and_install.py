# SPDX-License-Identifier: MIT
"""Fresh venvs that install some wheels only: attribute access works for what is there, and names
the wheel for what is not; wheels installed into separate directories still join."""

from __future__ import annotations

import os

from conftest import make_venv, pip_install_offline, run_python

_ONLY_IO = """
import mori
import mori.io
assert mori.io.IOEngine is not None
from mori.cpp import TransferStatus
assert TransferStatus is mori.io.TransferStatus
import importlib.metadata
print(mori.__version__, importlib.metadata.version("mori"))
for name in ("ops", "shmem", "umbp"):
    try:
        getattr(mori, name)
    except ImportError as exc:
        print(name, "->", exc)
    else:
        raise AssertionError(f"mori.{name} imported without its wheel")
try:
    import mori.ops
except ImportError as exc:
    print("import mori.ops ->", exc)
try:
    from mori.cpp import EpDispatchCombineConfig
except ImportError as exc:
    print("mori.cpp.EpDispatchCombineConfig ->", exc)
"""


def test_only_mori_io_installed(tmp_path, wheelhouse):
    python = make_venv(tmp_path / "venv")
    pip_install_offline(python, wheelhouse, "mori-io")  # pulls the root `mori` as its dependency
    done = run_python(python, _ONLY_IO)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    reported, installed = lines[0].split()
    assert reported == installed
    assert any(line.startswith("ops -> ") and "mori-ep" in line and "pip install" in line for line in lines), lines
    assert any(line.startswith("shmem -> ") and "mori-shmem" in line for line in lines), lines
    assert any(line.startswith("umbp -> ") and "mori-umbp" in line for line in lines), lines
    assert any(line.startswith("import mori.ops -> ") and "mori-ep" in line for line in lines), lines
    assert any(line.startswith("mori.cpp.EpDispatchCombineConfig -> ") and "mori-ep" in line for line in lines), lines


def test_wheels_in_separate_directories_join(tmp_path, wheelhouse):
    python = make_venv(tmp_path / "venv")
    root_dir, io_dir = tmp_path / "root", tmp_path / "io"
    pip_install_offline(python, wheelhouse, "mori", target=root_dir)
    pip_install_offline(python, wheelhouse, "mori-io", target=io_dir)
    assert not (io_dir / "mori" / "__init__.py").exists()  # only the root wheel owns it
    done = run_python(
        python,
        "import mori, mori.io; print(mori.io.__file__)",
        env={"PYTHONPATH": os.pathsep.join([str(root_dir), str(io_dir)])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(io_dir))
