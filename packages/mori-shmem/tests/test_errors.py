# SPDX-License-Identifier: MIT
"""The exception hierarchy of mori.shmem.errors (spec: every failure is a typed MoriShmemError)."""

from __future__ import annotations

import pytest

import mori.shmem as shmem
import mori.shmem.errors as errors

HIERARCHY = {
    "InvalidArgumentError": ValueError,
    "NotInitializedError": RuntimeError,
    "AlreadyInitializedError": RuntimeError,
    "HeapExhaustedError": MemoryError,
    "BootstrapTimeoutError": TimeoutError,
    "WaitTimeoutError": TimeoutError,
    "PeerLostError": ConnectionError,
    "AuthenticationError": PermissionError,
    "SymmetryError": RuntimeError,
    "InvalidPointerError": ValueError,
    "PeOutOfRangeError": IndexError,
    "UnsupportedError": RuntimeError,
    "ConfigError": ValueError,
    "SystemCallError": OSError,
    "InternalError": RuntimeError,
}


def test_base_class() -> None:
    assert issubclass(errors.MoriShmemError, Exception)
    assert shmem.MoriShmemError is errors.MoriShmemError


@pytest.mark.parametrize(("name", "builtin"), sorted(HIERARCHY.items()))
def test_error_class(name: str, builtin: type) -> None:
    cls = getattr(errors, name)
    assert getattr(shmem, name) is cls, f"mori.shmem.{name} is not re-exported from mori.shmem.errors"
    assert issubclass(cls, errors.MoriShmemError)
    assert issubclass(cls, builtin)
    exc = cls("size 5 exceeds 4")
    assert str(exc) == "size 5 exceeds 4"
    with pytest.raises(builtin):
        raise exc


def test_error_classes_are_distinct() -> None:
    classes = [getattr(errors, n) for n in HIERARCHY]
    assert len(set(classes)) == len(classes)
    # Timeouts of waits and of the bootstrap can be told apart.
    assert not issubclass(errors.WaitTimeoutError, errors.BootstrapTimeoutError)
    assert not issubclass(errors.BootstrapTimeoutError, errors.WaitTimeoutError)
