# SPDX-License-Identifier: MIT
"""Bench provenance: what the dict holds, measured against independent sources, and a real
mori-io-bench run whose JSON carries it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from test_versions import MODULES

from mori._provenance import KEYS, provenance


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()


def test_fields_match_their_sources(tmp_path: Path) -> None:
    found = provenance(cwd=tmp_path)  # not a checkout
    assert tuple(found) == KEYS
    assert found["packages"] == {d: importlib.metadata.version(d) for d in sorted(MODULES)}
    assert found["git_revision"] is None and found["git_dirty"] is None
    assert found["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    assert found["hostname"] == os.uname().nodename
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.MULTILINE)
    if model:  # x86 kernels name the model; others may not, and then platform.processor() answers
        assert found["cpu"] == model.group(1).strip()
    if found["driver"] is not None:
        assert re.fullmatch(r"\d+\.\d+", found["driver"])
    json.dumps(found)  # it goes into JSON files as it is


def test_torch_fields() -> None:
    torch = pytest.importorskip("torch")
    found = provenance()
    assert found["torch"] == str(torch.__version__)
    assert found["cuda"] == torch.version.cuda
    assert found["gpu"] == (torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)


def test_git_revision_of_a_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    _git(repo, "init", "-q")
    (repo / "f.txt").write_text("one\n")
    _git(repo, "add", "f.txt")
    _git(repo, *ident, "commit", "-q", "-m", "one")
    commit = _git(repo, "log", "-1", "--format=%H")
    found = provenance(cwd=repo)
    assert (found["git_revision"], found["git_dirty"]) == (commit, False)
    (repo / "f.txt").write_text("two\n")
    assert provenance(cwd=repo)["git_dirty"] is True


def test_mori_io_bench_json_carries_provenance(tmp_path: Path) -> None:
    out = tmp_path / "io.json"
    script = Path(sys.executable).parent / "mori-io-bench"
    argv = [str(script), "--op_type", "read", "--start_block_size", "4096", "--max_block_size", "4096",
            "--max_batch_size", "1", "--num_iter", "2", "--warmup_iter", "1", "--num_threads", "1",
            "--num_data_conns", "1", "--skip_mooncake", "--json", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())["provenance"]
    assert tuple(found) == KEYS
    assert found["packages"]["mori-io"] == importlib.metadata.version("mori-io")
    assert found["git_revision"] == _git(REPO, "rev-parse", "HEAD")
