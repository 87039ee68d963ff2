# SPDX-License-Identifier: MIT
"""The C++ API (cco.hpp, libmori_cco.so): examples/cpp/lsa_ring.cpp is compiled against the
installed SDK and run as separate processes, the way a C++ program uses it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PACKAGE_ROOT

import mori.cco
import mori.shmem
from mori.testing import run_commands


def _build(tmp_path: Path, example: str) -> Path:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    binary = tmp_path / Path(example).stem
    build = subprocess.run(
        [compiler, "-std=c++17", "-O1", str(PACKAGE_ROOT / "examples" / "cpp" / example), "-o", str(binary),
         f"-I{mori.cco.get_include()}", f"-I{mori.shmem.get_include()}", f"-L{mori.cco.get_library_dir()}",
         "-lmori_cco", f"-Wl,-rpath,{mori.cco.get_library_dir()}", f"-Wl,-rpath,{mori.shmem.get_library_dir()}"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    return binary


def _run_ranks(binary: Path, nranks: int, tmp_path: Path, *extra: str) -> list[str]:
    """Every rank's stdout; all ranks are killed at the timeout, a failed one is named with its stderr."""
    uid_file = tmp_path / "uid"
    commands = [[str(binary), str(r), str(nranks), str(uid_file), *extra] for r in range(nranks)]
    return [result.stdout for result in run_commands(commands, timeout=120)]


@pytest.mark.parametrize("nranks", [2, 4])
def test_cpp_example_ring(tmp_path: Path, nranks: int) -> None:
    outputs = _run_ranks(_build(tmp_path, "lsa_ring.cpp"), nranks, tmp_path)
    for rank, out in enumerate(outputs):
        assert f"rank {rank} read {1000 + (rank + 1) % nranks}" in out and "SUCCESS" in out, out


@pytest.mark.parametrize(("nranks", "per_node"), [(2, 1), (4, 2)])
def test_cpp_example_gda_exchange(tmp_path: Path, nranks: int, per_node: int) -> None:
    outputs = _run_ranks(_build(tmp_path, "gda_exchange.cpp"), nranks, tmp_path, str(per_node))
    for rank, out in enumerate(outputs):
        for peer in range(nranks):
            if peer // per_node != rank // per_node:
                assert f"rank {rank} got {1000 + peer} from {peer}" in out, out
        first_remote = next(p for p in range(nranks) if p // per_node != rank // per_node)
        assert f"rank {rank} read {1000 + first_remote} from {first_remote}" in out and "SUCCESS" in out, out


def _dynamic_symbols(library: Path, *flags: str) -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils) on this machine")
    listing = subprocess.run([nm, "-D", "-C", *flags, str(library)], capture_output=True, text=True, check=True)
    # "<address> <type> <name>", the address absent for an undefined symbol
    return [m.group(1) for m in re.finditer(r"^\s*(?:[0-9a-f]+\s+)?\w\s+(.+)$", listing.stdout, re.MULTILINE)]


def test_the_library_exports_only_the_cco_api_and_python_goes_through_it() -> None:
    """libmori_cco.so exports cco.hpp's calls and nothing else (hidden visibility, private static
    libraries); the Python module _C calls those same exported functions."""
    library = Path(mori.cco.get_library_dir()) / "libmori_cco.so"
    exported = _dynamic_symbols(library, "--defined-only")
    assert exported and all(name.startswith("cco") for name in exported), exported
    assert {"ccoCommCreate(ccoUniqueId const&, int, int, unsigned long, ccoComm**, ccoBackend, int)",
            "ccoCommGetInfo(ccoComm*, ccoCommInfo*)"} <= set(exported)  # fmt: skip
    extension = next(Path(mori.cco.__file__).parent.glob("_C.*.so"))
    imported = {name.split("(")[0] for name in _dynamic_symbols(extension, "--undefined-only")}
    assert {"ccoCommCreate", "ccoMemAllocAligned", "ccoDevCommCreate", "ccoCollectiveRunHost"} <= imported
