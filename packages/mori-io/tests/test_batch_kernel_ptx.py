# SPDX-License-Identifier: MIT
"""The P2P batch-copy kernel ships as PTX generated from src/gpu/kernels/copy_batch.cu (mori.io
builds without the CUDA toolkit): the checked-in PTX must be what the source compiles to, and it
must assemble for the GPUs mori-io targets."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "src" / "gpu" / "kernels"
NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc (CUDA toolkit) on this machine")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_copy_batch_ptx", KERNELS / "gen_copy_batch_ptx.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_nvcc
def test_checked_in_ptx_is_what_the_source_compiles_to():
    assert _generator().generate(NVCC) == (KERNELS / "copy_batch_ptx.inc").read_text(), (
        "copy_batch_ptx.inc is stale: run python src/gpu/kernels/gen_copy_batch_ptx.py"
    )


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_assembles(arch, tmp_path):
    ptxas = Path(NVCC or "").with_name("ptxas")
    if not ptxas.is_file():
        pytest.skip("no ptxas next to nvcc")
    text = (KERNELS / "copy_batch_ptx.inc").read_text()
    ptx = text[text.index('R"PTX(') + len('R"PTX(') : text.rindex(")PTX")]
    (tmp_path / "k.ptx").write_text(ptx)
    result = subprocess.run([str(ptxas), f"-arch={arch}", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.ptx")],
                            capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
