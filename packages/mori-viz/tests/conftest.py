# SPDX-License-Identifier: MIT
"""Shared configuration of the mori-viz tests: markers and the per-test time limit come from
mori.testing.pytest_plugin; the helper modules sit beside the tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest_plugins = ["mori.testing.pytest_plugin"]

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:  # synthetic.py and device_compile.py sit beside the tests
    sys.path.insert(0, str(TESTS_DIR))


def pytest_mori_default_timeout(config: pytest.Config) -> float:
    return 180
