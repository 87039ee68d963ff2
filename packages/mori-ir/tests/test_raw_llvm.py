# SPDX-License-Identifier: MIT
"""The framework-free path (examples/raw_llvm_ring.py): LLVM IR + the bitcode -> PTX -> a launch.

Linking and PTX generation run everywhere (llvmlite); ptxas, where one is found (Triton's wheel
ships one), checks that the PTX assembles for real GPUs; the launch needs a GPU.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mori.ir.errors import BitcodeNotFoundError
from mori.shmem.device import DeviceState

pytest.importorskip("llvmlite", reason="the raw example links with llvmlite (pip install llvmlite)")

# Imported by name (not from a file spec) so that the spawned PEs can unpickle its pe_program:
# they inherit sys.path.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))
example = importlib.import_module("raw_llvm_ring")


def _ptxas() -> str | None:
    try:
        import triton

        bundled = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))
    except ImportError:
        bundled = []
    return bundled[0] if bundled else shutil.which("ptxas")


@pytest.fixture(scope="module", params=["sm_80", "sm_90"])
def ptx(request) -> tuple[str, str]:
    try:
        return request.param, example.link_to_ptx(example.kernel_ir(), request.param)
    except BitcodeNotFoundError as exc:
        pytest.skip(f"no device bitcode here: {exc}")


def test_linked_ptx_is_self_contained(ptx):
    arch, text = ptx
    assert re.search(rf"^\.target {arch}\b", text, re.M)
    assert re.search(r"^\.visible \.entry ring_put\(", text, re.M)
    # The state global the host fills, as large as mori.shmem.DeviceState.
    found = re.search(r"^\.visible \.const \.align 8 \.b8 mori_shmem_device_state\[(\d+)\];", text, re.M)
    assert found and int(found[1]) == ctypes.sizeof(DeviceState)
    assert ".extern .func" not in text  # every mori_shmem_* call was resolved by the link
    # Internalised library functions that the kernel does not call are gone.
    assert "mori_shmem_getmem_nbi_block" not in text


def test_ptx_assembles(ptx, tmp_path):
    ptxas = _ptxas()
    if ptxas is None:
        pytest.skip("no ptxas here (it ships in the triton wheel and the CUDA toolkit)")
    arch, text = ptx
    (tmp_path / "k.ptx").write_text(text)
    done = subprocess.run([ptxas, f"-arch={arch}", str(tmp_path / "k.ptx"), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4])
def test_raw_ring_on_the_gpu(gpu_available, nranks):
    if not gpu_available:
        pytest.skip("no GPU: the launch needs one")
    from mori.shmem.jit import resolve_arch
    from mori.shmem.testing import run_pes

    text = example.link_to_ptx(example.kernel_ir(), resolve_arch()[0])
    sizes = run_pes(example.pe_program, nranks, 65536 + 3, text,
                    env={"MORI_SHMEM_BACKEND": "cuda", "MORI_SHMEM_HEAP_SIZE": "256M"}, timeout=180)  # fmt: skip
    assert sizes == [65536 + 3] * nranks
