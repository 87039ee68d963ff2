# SPDX-License-Identifier: MIT
"""The C++ API (cco.hpp, libmori_cco.so): examples/cpp/lsa_ring.cpp is compiled against the
installed SDK and run as separate processes, the way a C++ program uses it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PACKAGE_ROOT

import mori.cco
import mori.shmem


@pytest.mark.parametrize("nranks", [2, 4])
def test_cpp_example_ring(tmp_path: Path, nranks: int) -> None:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    binary = tmp_path / "lsa_ring"
    build = subprocess.run(
        [compiler, "-std=c++17", "-O1", str(PACKAGE_ROOT / "examples" / "cpp" / "lsa_ring.cpp"), "-o", str(binary),
         f"-I{mori.cco.get_include()}", f"-I{mori.shmem.get_include()}", f"-L{mori.cco.get_library_dir()}",
         "-lmori_cco", f"-Wl,-rpath,{mori.cco.get_library_dir()}", f"-Wl,-rpath,{mori.shmem.get_library_dir()}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    uid_file = tmp_path / "uid"
    ranks = [
        subprocess.Popen([str(binary), str(r), str(nranks), str(uid_file)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for r in range(nranks)
    ]  # fmt: skip
    for rank, proc in enumerate(ranks):
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err
        assert f"rank {rank} read {1000 + (rank + 1) % nranks}" in out and "SUCCESS" in out, out
