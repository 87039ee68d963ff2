# SPDX-License-Identifier: MIT
"""``mori.cpp``: every MORI compiled-module name resolves, lazily, to the implementing package."""

from __future__ import annotations

import importlib

import pytest

import mori.cpp
from mori.cpp import NAMES


@pytest.mark.parametrize("name", sorted(NAMES))
def test_every_mori_cpp_name_resolves(name):
    value = getattr(mori.cpp, name)
    assert value is getattr(importlib.import_module(NAMES[name]), name)


def test_transfer_status_as_sglang_imports_it():
    import mori.io
    from mori.cpp import TransferStatus  # SGLang's MORI connector's first line

    assert TransferStatus is mori.io.TransferStatus


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(AttributeError, match="TransferStatus"):
        mori.cpp.NoSuchName  # noqa: B018


def test_mori_cpp_imports_nothing_until_asked(fresh_python):
    done = fresh_python("import sys, mori.cpp; print(sorted(m for m in sys.modules if m.startswith('mori.')))")
    assert done.returncode == 0, done.stderr
    assert "mori.io" not in done.stdout and "mori.ep" not in done.stdout
