# SPDX-License-Identifier: MIT
"""``python -m mori env``: every installed package's settings, JSON, invalid values flagged, and each
package's ``python -m mori.<pkg> env`` printing the same thing filtered to it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
from conftest import run_python

_ENV = "import sys; from mori.__main__ import main; sys.exit(main(sys.argv[1:]))"


def _mori_env(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run_python(sys.executable, f"import sys; sys.argv[1:] = {['env', *args]!r}\n{_ENV}", env)


def _json(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(done.stdout)


def test_json_lists_every_installed_package_with_its_declared_defaults() -> None:
    done = _mori_env("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    document = _json(done)
    assert document["invalid"] == [] and document["failed_registries"] == {}
    listed = {entry["package"] for entry in document["settings"]}
    installed = {point.name for point in entry_points(group="mori.settings")}
    assert listed == installed
    by_name = {entry["name"]: entry for entry in document["settings"]}
    # Each registry's own declaration is the reference: same default and type, source "default".
    for point in entry_points(group="mori.settings"):
        for setting in point.load():
            entry = by_name[setting.name]
            assert entry["package"] == point.name
            assert entry["source"] == "default" and entry["error"] is None
            assert entry["default"] == (setting.default_text if hasattr(setting, "default_text") else setting.default)
            assert entry["type"] == setting.kind


def test_values_from_the_environment_are_shown_with_their_source() -> None:
    pytest.importorskip("mori.io")
    done = _mori_env("--json", "--package", "io", MORI_IO_TCP_CHUNK_BYTES="2M", MORI_LOG_LEVEL="debug")
    assert done.returncode == 0, done.stdout + done.stderr
    entries = _json(done)["settings"]
    assert {entry["package"] for entry in entries} == {"mori-io"}
    chunk = next(entry for entry in entries if entry["name"] == "MORI_IO_TCP_CHUNK_BYTES")
    assert (chunk["value"], chunk["default"], chunk["source"]) == ("2M", "4M", "environment")


@pytest.mark.parametrize(
    ("package", "variable", "bad", "reason"),
    [
        ("mori-io", "MORI_IO_TCP_NUM_DATA_CONNS", "lots", "does not parse as int"),
        ("mori-umbp", "UMBP_SSD_CAPACITY", "lots", "does not parse as size"),
        ("mori-ep", "MORI_EP_TIMEOUT", "-1", "is out of range: must be >= 0"),
        ("mori", "MORI_LOG_LEVEL", "loud", "does not parse as choice"),
        ("mori-cco", "MORI_CCO_BLOCKS", "many", "is not a non-negative integer"),  # the native library's check
        ("mori-shmem", "MORI_SHMEM_HEAP_SIZE", "12Q", "has an unknown unit"),  # the native library's size parser
    ],
)
def test_an_invalid_value_is_flagged_and_the_exit_status_is_1(
    package: str, variable: str, bad: str, reason: str
) -> None:
    if package not in {point.name for point in entry_points(group="mori.settings")}:
        pytest.skip(f"{package} is not installed")
    # MORI_LOG_LEVEL=loud would stop `import mori` itself; the command must still report it.
    done = _mori_env("--json", **{variable: bad})
    if variable == "MORI_LOG_LEVEL":
        assert done.returncode != 0 and "MORI_LOG_LEVEL='loud'" in done.stderr
        return
    assert done.returncode == 1, done.stdout + done.stderr
    document = _json(done)
    assert document["invalid"] == [variable]
    (entry,) = [entry for entry in document["settings"] if entry["name"] == variable]
    assert entry["package"] == package and entry["value"] == bad and reason in entry["error"]
    text = _mori_env(**{variable: bad})
    assert text.returncode == 1
    (line,) = [line for line in text.stdout.splitlines() if line.startswith(f"{variable}=")]
    assert line.startswith(f"{variable}={bad}  (") and "INVALID:" in line and reason in line


@pytest.mark.parametrize("short", ["shmem", "ep", "cco", "ir", "io", "umbp", "viz"])
def test_each_package_env_command_prints_the_one_command_filtered(short: str) -> None:
    if f"mori-{short}" not in {point.name for point in entry_points(group="mori.settings")}:
        pytest.skip(f"mori-{short} is not installed")
    for extra in ([], ["--json"]):
        argv = ["python -m", "env", *extra]
        own = run_python(
            sys.executable,
            f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_module('mori.{short}', run_name='__main__')",
        )
        one = _mori_env(*extra, "--package", short, "--package", "mori")
        assert own.returncode == one.returncode == 0, own.stderr + one.stderr
        assert own.stdout == one.stdout
        assert f"# mori-{short}\n" in own.stdout or extra


def test_an_unknown_package_is_reported() -> None:
    done = _mori_env("--json", "--package", "nosuch")
    assert done.returncode == 1
    assert "mori-nosuch" in _json(done)["failed_registries"]


def test_listing_the_registries_imports_no_torch() -> None:
    done = run_python(
        sys.executable,
        "import sys\nfrom mori import _env_command\n_env_command.collect()\nprint('torch' in sys.modules)",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
