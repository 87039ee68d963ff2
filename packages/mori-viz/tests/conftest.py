# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-viz tests: markers, a per-test time limit, and helper imports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # synthetic.py and device_compile.py sit beside the tests
    sys.path.insert(0, str(TESTS_DIR))

DEFAULT_TEST_TIMEOUT_S = 180


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few tens of seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skips with the reason elsewhere)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TEST_TIMEOUT_S))
