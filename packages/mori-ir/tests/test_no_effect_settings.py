# SPDX-License-Identifier: MIT
"""Settings of mori-ir accepted for compatibility with MORI, with no effect: the ``qp`` argument of
the device functions and ``find_bitcode(cov=...)``. Each is logged once at INFO when set
(mori._compat.note_no_effect), and the result is the same as without it: the bitcode's functions
never read ``qp`` (checked in its LLVM IR), and ``cov`` names the same file."""

from __future__ import annotations

import logging
import re

import pytest

from mori import _compat
from mori.ir.bitcode import COV_NO_EFFECT, find_bitcode
from mori.ir.functions import DEVICE_FUNCTIONS

QP_FUNCTIONS = [f for f in DEVICE_FUNCTIONS.values() if any(name == "qp" for name, _ in f.args)]


@pytest.fixture
def fresh_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """note_no_effect logs once per process: give this test a process-fresh memory of it."""
    monkeypatch.setattr(_compat, "_noted", set())


def _notes(caplog: pytest.LogCaptureFixture, setting: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mori.compat" and r.getMessage().startswith(f"{setting}=")]


def test_find_bitcode_cov_is_logged_once_and_names_the_same_file(bitcode_path, fresh_notes, caplog) -> None:
    caplog.set_level(logging.INFO, logger="mori.compat")
    assert find_bitcode("full") == bitcode_path
    assert not _notes(caplog, "find_bitcode(cov=...)")
    assert find_bitcode("full", cov=5) == bitcode_path
    assert find_bitcode("full", cov=6) == bitcode_path
    notes = _notes(caplog, "find_bitcode(cov=...)")
    assert len(notes) == 1 and notes[0].levelno == logging.INFO
    assert "=5 " in notes[0].getMessage() and COV_NO_EFFECT in notes[0].getMessage()


def test_no_device_function_reads_qp(bitcode_path) -> None:
    llvm = pytest.importorskip("llvmlite.binding", reason="reading the bitcode needs llvmlite")
    with open(bitcode_path, "rb") as f:
        text = str(llvm.parse_bitcode(f.read()))
    assert len(QP_FUNCTIONS) > 50
    for fn in QP_FUNCTIONS:
        found = re.search(rf"^define [^\n]*@{fn.symbol}\(([^)]*)\)[^\n]*\{{\n(.*?)^\}}", text, re.M | re.S)
        assert found, f"{fn.symbol} is not defined in the bitcode"
        params, body = found[1], found[2]
        names = re.findall(r"%([\w.]+)", params)
        assert len(names) == len(fn.args), (fn.symbol, params)
        qp = names[[name for name, _ in fn.args].index("qp")]
        assert not re.search(rf"%{re.escape(qp)}(?![\w.])", body), f"{fn.symbol} reads its qp argument (%{qp})"
