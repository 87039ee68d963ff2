# SPDX-License-Identifier: MIT
"""The hooks a package's tests/conftest.py implements to configure mori.testing.pytest_plugin."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_mori_default_timeout(config: pytest.Config) -> float | None:
    """Seconds a test below this conftest may take, unless its ``timeout`` marker says otherwise.

    Called per test through the test's own hook proxy, so each package's conftest sets its own."""


@pytest.hookspec
def pytest_mori_preload(config: pytest.Config) -> list[str] | None:
    """Modules the fork server that the PEs are forked from imports once per test run, beside numpy
    and torch where the test process has imported them (mori.testing._start): modules that many of
    the suite's PEs import (costly: torch takes 1-3 s per PE on a 2-core machine) and that read no
    ``MORI_*``, ``JAX_*`` or ``XLA_*`` variable when imported. Never a module of mori, jax or jaxlib:
    those read the PE's settings."""
