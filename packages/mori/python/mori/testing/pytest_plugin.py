# SPDX-License-Identifier: MIT
"""The pytest plugin of the mori test suites.

Each package's ``tests/conftest.py`` loads it, and states its default per-test timeout where that
is not :data:`DEFAULT_TEST_TIMEOUT_S` (300 s)::

    pytest_plugins = ["mori.testing.pytest_plugin"]

    def pytest_mori_default_timeout(config):
        return 60

What it adds:

- the markers ``slow`` and ``gpu`` (and ``timeout`` where pytest-timeout is not installed);
- a per-test timeout: the conftest's default (or the test's ``timeout`` marker) becomes
  pytest-timeout's limit, and the launchers of :mod:`mori.testing` end a few seconds before it,
  killing every PE and saying which one hung or died, with the end of its output;
- on a failed test, every PE's and peer's output (one report section each);
- PEs and peers forked from a fork server that imports costly modules once
  (:mod:`mori.testing._start`); a conftest names more with ``pytest_mori_preload(config)``
  (``return ["torch"]``);
- the fixtures ``backend`` (cpu, and cuda where a GPU is visible), ``gpu_available``,
  ``free_port`` and ``wheelhouse``, and the hypothesis profile ``mori``.

It is imported only by pytest (it imports pytest); the rest of :mod:`mori.testing` does not need it.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from mori.testing import _hookspecs, _logs, _start
from mori.testing.launcher import find_free_port

#: A test's limit when its conftest names none and it has no timeout marker.
DEFAULT_TEST_TIMEOUT_S = 300.0

_TIMEOUT_KEY = pytest.StashKey[float]()
_SECTIONS_KEY = pytest.StashKey[list[tuple[str, str]]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(_hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes more than a few tens of seconds; deselect with -m 'not slow'")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU (skips with the reason elsewhere)")
    if not config.pluginmanager.hasplugin("timeout"):  # the GPU machine has no pytest-timeout
        config.addinivalue_line("markers", "timeout(seconds): deadline of a test under pytest-timeout")
    _logs.start_recording()
    _load_hypothesis_profile()


def _load_hypothesis_profile() -> None:
    try:
        from hypothesis import HealthCheck, settings  # type: ignore[import-not-found,unused-ignore]  # a test dependency
    except ImportError:  # hypothesis is a test dependency of some packages only
        return
    settings.register_profile(
        "mori",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mori"))


def _marker_timeout(item: pytest.Item) -> float | None:
    marker = item.get_closest_marker("timeout")
    if marker is None:
        return None
    value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    return None if value is None else float(value)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for modules in config.hook.pytest_mori_preload(config=config):
        try:
            _start.preload(modules or [])
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    has_timeout_plugin = config.pluginmanager.hasplugin("timeout")
    for item in items:
        seconds = _marker_timeout(item)
        if seconds is None:
            default = item.ihook.pytest_mori_default_timeout(config=config)
            seconds = float(default if default is not None else DEFAULT_TEST_TIMEOUT_S)
            if has_timeout_plugin:
                item.add_marker(pytest.mark.timeout(seconds))
        item.stash[_TIMEOUT_KEY] = seconds


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    """The test's deadline, for the launchers to end before it; cleared when the test ends."""
    seconds = item.stash.get(_TIMEOUT_KEY, 0.0)
    _logs.take_recorded()  # what an earlier test left behind is not this test's
    item.stash[_SECTIONS_KEY] = []
    _logs.set_test_deadline(time.monotonic() + seconds if seconds > 0 else None)
    try:
        return (yield)
    finally:
        _logs.set_test_deadline(None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """Every process's output of a failed test, one report section each."""
    report: pytest.TestReport = yield
    sections = item.stash.setdefault(_SECTIONS_KEY, [])
    sections.extend(_logs.take_recorded())
    if report.failed:
        for title, text in sections:
            report.sections.append((f"output of {title}", text or "(nothing)"))
        sections.clear()
    return report


@functools.cache
def cuda_available() -> bool:
    """Whether mori-shmem's cuda backend can run here (a CUDA driver and a visible GPU). No
    context is made in this process: the PEs are other processes. False without mori-shmem."""
    try:
        import mori.shmem
    except ImportError:
        return False
    return bool(mori.shmem.shmem_cuda_available())


@pytest.fixture(scope="session")
def gpu_available() -> bool:
    """:func:`cuda_available`, as a fixture."""
    return cuda_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> str:
    """Every backend that exists: cpu always, cuda where a GPU is visible (skips with the reason elsewhere)."""
    if request.param == "cuda" and not cuda_available():
        pytest.skip("cuda backend: no NVIDIA GPU / CUDA driver on this machine")
    return str(request.param)


@pytest.fixture
def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    return find_free_port()


@pytest.fixture(scope="session")
def wheelhouse(pytestconfig: pytest.Config) -> Path:
    """The wheelhouse nox built (MORI_WHEELHOUSE), else the repository's ./wheelhouse."""
    path = Path(os.environ.get("MORI_WHEELHOUSE", _repository(pytestconfig) / "wheelhouse"))
    if not any(path.glob("mori-*.whl")):
        pytest.fail(f"no mori wheels in {path}: run `nox -s build-root build-io` first")
    return path


def _repository(config: pytest.Config) -> Path:
    """The checkout the tests run from: the first folder up from where pytest started (or its
    rootdir) that holds the noxfile."""
    for start in (config.invocation_params.dir, config.rootpath):
        for folder in (start, *start.parents):
            if (folder / "noxfile.py").is_file():
                return folder
    return config.invocation_params.dir
