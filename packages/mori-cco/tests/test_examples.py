# SPDX-License-Identifier: MIT
"""The examples run as users run them (their own processes) and report SUCCESS on every rank."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import PACKAGE_ROOT

from mori.testing.pytest_plugin import cuda_available as gpu_available

EXAMPLES = PACKAGE_ROOT / "examples" / "python"


def _run(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_allreduce_example(backend: str) -> None:
    if backend == "cuda" and not gpu_available():
        pytest.skip("cuda backend: no NVIDIA GPU / CUDA driver on this machine")
    out = _run("allreduce.py", "--nranks", "2", "--backend", backend)
    assert out.count("SUCCESS") == 2, out


@pytest.mark.gpu
@pytest.mark.parametrize("nranks", [2, 4, 8])
def test_ring_put_example_on_the_gpu(nranks: int) -> None:
    if not gpu_available():
        pytest.skip("the device API runs on the cuda backend only: no NVIDIA GPU here")
    out = _run("ring_put.py", "--nranks", str(nranks))
    assert out.count("SUCCESS") == nranks, out


@pytest.mark.gpu
@pytest.mark.parametrize(("nranks", "per_node"), [(2, 1), (4, 2), (8, 4)])
def test_gda_put_example_on_the_gpu(nranks: int, per_node: int) -> None:
    if not gpu_available():
        pytest.skip("the device API runs on the cuda backend only: no NVIDIA GPU here")
    out = _run("gda_put.py", "--nranks", str(nranks), "--ranks-per-node", str(per_node))
    assert out.count("SUCCESS") == nranks, out


@pytest.mark.parametrize(
    ("backend", "nranks"), [("cpu", 2), ("cpu", 4), pytest.param("cuda", 8, marks=pytest.mark.gpu)]
)
def test_copy_engine_put_example(backend: str, nranks: int) -> None:
    if backend == "cuda" and not gpu_available():
        pytest.skip("cuda backend: no NVIDIA GPU / CUDA driver on this machine")
    out = _run("copy_engine_put.py", "--nranks", str(nranks), "--backend", backend)
    assert out.count("SUCCESS") == nranks, out
