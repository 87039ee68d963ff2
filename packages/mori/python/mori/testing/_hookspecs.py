# SPDX-License-Identifier: MIT
"""The hook a package's tests/conftest.py implements to configure mori.testing.pytest_plugin."""

from __future__ import annotations

import pytest


@pytest.hookspec(firstresult=True)
def pytest_mori_default_timeout(config: pytest.Config) -> float | None:
    """Seconds a test below this conftest may take, unless its ``timeout`` marker says otherwise.

    Called per test through the test's own hook proxy, so each package's conftest sets its own."""
