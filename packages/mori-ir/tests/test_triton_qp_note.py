# SPDX-License-Identifier: MIT
"""The Triton frontend logs once (mori._compat.note_no_effect, INFO) that ``qp`` has no effect
when a kernel passes anything but the constant 0, and the kernel compiles to the same code as
with 0. Kernels are compiled for sm_90 with the bitcode linked, no GPU needed (as in
test_triton_compile.py)."""

from __future__ import annotations

import logging
import re

import pytest

triton = pytest.importorskip("triton", reason="the Triton frontend needs triton: pip install triton")

import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import mori.ir.triton as mori_ir  # noqa: E402
from mori import _compat  # noqa: E402
from mori.ir.functions import QP_NO_EFFECT  # noqa: E402


@triton.jit
def quiet_const_qp(out, QP: tl.constexpr):
    tl.store(out, mori_ir.quiet_thread_pe_qp(0, QP))


@triton.jit
def quiet_runtime_qp(out, qp):
    tl.store(out, mori_ir.quiet_thread_pe_qp(0, qp))


def _compile(kernel, signature, constexprs, bitcode_path):
    source = ASTSource(kernel, signature, constexprs)
    options = {"extern_libs": {"mori_shmem": bitcode_path}}
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)


def _qp_notes(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mori.compat" and r.getMessage().startswith("qp=")]


def _code(ptx: str) -> str:
    """The PTX without comments and the kernel's own name."""
    return re.sub(r"//[^\n]*", "", ptx).replace("quiet_const_qp", "K")


@pytest.fixture
def fresh_notes(monkeypatch: pytest.MonkeyPatch, tmp_path, bitcode_path) -> None:
    """note_no_effect logs once per process: a process-fresh memory of it, and a fresh Triton
    cache so every compile traces the kernel (the wrappers run while tracing)."""
    monkeypatch.setattr(_compat, "_noted", set())
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))


def test_constant_qp_is_logged_once_and_compiles_the_same(bitcode_path, fresh_notes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="mori.compat")
    signature = {"out": "*i32", "QP": "constexpr"}
    zero = _compile(quiet_const_qp, signature, {"QP": 0}, bitcode_path)
    assert not _qp_notes(caplog)
    three = _compile(quiet_const_qp, signature, {"QP": 3}, bitcode_path)
    _compile(quiet_const_qp, signature, {"QP": 5}, bitcode_path)
    notes = _qp_notes(caplog)
    assert len(notes) == 1, [n.getMessage() for n in notes]
    assert notes[0].levelno == logging.INFO
    assert notes[0].getMessage().startswith("qp=3 ") and QP_NO_EFFECT in notes[0].getMessage()
    assert _code(three.asm["ptx"]) == _code(zero.asm["ptx"])


def test_runtime_qp_counts_as_set(bitcode_path, fresh_notes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="mori.compat")
    _compile(quiet_runtime_qp, {"out": "*i32", "qp": "i32"}, {}, bitcode_path)
    notes = _qp_notes(caplog)
    assert len(notes) == 1 and "runtime value" in notes[0].getMessage()
