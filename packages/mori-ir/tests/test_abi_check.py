# SPDX-License-Identifier: MIT
"""mori-ir refuses, at import, a mori-shmem whose ABI differs from the one its shipped bitcode was
built against (the device-state layout the bitcode reads), as mori-ep and mori-cco do."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.metadata import distribution
from pathlib import Path

import pytest

import mori
import mori.ir
import mori.shmem
from mori.ir import _abi_check, bitcode


def test_the_wheel_records_the_abi_its_bitcode_was_built_against():
    built = _abi_check.built_abi_version()
    if bitcode.shipped_bitcode() is None:
        assert built is None  # nothing shipped: built at first use against the installed headers
    else:
        assert built == mori.shmem.__abi_version__


def test_check_abi_refuses_another_abi_and_names_both():
    with pytest.raises(ImportError, match=r"built against mori-shmem ABI 7, found 8.*MORI_SKIP_ABI_CHECK=1"):
        _abi_check.check_abi(7, 8)


def test_check_abi_passes_same_abi_and_no_shipped_bitcode(monkeypatch):
    monkeypatch.delenv(_abi_check.SKIP_ENV, raising=False)
    _abi_check.check_abi(3, 3)
    _abi_check.check_abi(None, 3)


def test_check_abi_skipped_on_request(monkeypatch):
    monkeypatch.setenv(_abi_check.SKIP_ENV, "1")
    _abi_check.check_abi(7, 8)


def _copy_with_abi(tmp_path: Path, abi: int) -> Path:
    """The installed root `mori` modules and mori.ir, with mori.ir's build info claiming ``abi``;
    mori.shmem still comes from the installed wheel (the namespace extends over sys.path)."""
    package = tmp_path / "mori"
    for file in distribution("mori").files or []:  # the root distribution's modules and subpackages
        if file.suffix == ".py" and file.parts[0] == "mori":
            (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(file.locate(), tmp_path / file)
    shutil.copytree(Path(mori.ir.__file__).parent, package / "ir", ignore=shutil.ignore_patterns("__pycache__"))
    (package / "ir" / "_build_info.py").write_text(f"SHMEM_ABI_VERSION = {abi}\n")
    return tmp_path


def _import_ir(path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k != _abi_check.SKIP_ENV}
    full_env.update(env, PYTHONPATH=str(path))
    code = "import mori.ir, mori.shmem; print(mori.ir.__file__); print(mori.shmem.__file__)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=full_env)


def test_import_refuses_a_mori_shmem_of_another_abi(tmp_path):
    found = mori.shmem.__abi_version__
    path = _copy_with_abi(tmp_path, found + 1)
    done = _import_ir(path)
    assert done.returncode != 0
    assert f"ImportError: mori-ir's shipped bitcode was built against mori-shmem ABI {found + 1}, found {found}" in (
        done.stderr
    )
    skipped = _import_ir(path, MORI_SKIP_ABI_CHECK="1")
    assert skipped.returncode == 0, skipped.stderr
    ir_file, shmem_file = skipped.stdout.split()
    assert ir_file.startswith(str(tmp_path))  # the copy was the one imported
    assert shmem_file == mori.shmem.__file__


def test_import_accepts_the_same_abi(tmp_path):
    done = _import_ir(_copy_with_abi(tmp_path, mori.shmem.__abi_version__))
    assert done.returncode == 0, done.stderr
