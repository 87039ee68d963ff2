# SPDX-License-Identifier: MIT
"""The env registry, jit_defines and the ``env`` command."""

from __future__ import annotations

import pytest

import mori.viz
from mori.viz.cli import main
from mori.viz.errors import ConfigError
from mori.viz.settings import setting


@pytest.mark.parametrize(
    ("text", "enabled"), [("1", True), ("yes", True), ("ON", True), ("0", False), ("off", False), ("", False)]
)
def test_enable_profiler_drives_jit_defines(monkeypatch, text, enabled):
    monkeypatch.setenv("MORI_ENABLE_PROFILER", text)
    assert mori.viz.profiler_enabled() is enabled
    assert mori.viz.jit_defines() == ({"MORI_VIZ_ENABLED": 1} if enabled else {})


def test_explicit_argument_wins(monkeypatch):
    monkeypatch.setenv("MORI_ENABLE_PROFILER", "1")
    assert mori.viz.jit_defines(enabled=False) == {}
    monkeypatch.delenv("MORI_ENABLE_PROFILER")
    assert mori.viz.jit_defines(enabled=True) == {"MORI_VIZ_ENABLED": 1}


@pytest.mark.parametrize(
    ("name", "text", "match"),
    [
        ("MORI_ENABLE_PROFILER", "maybe", "MORI_ENABLE_PROFILER='maybe' is not a boolean"),
        ("MORI_VIZ_EVENTS_PER_WARP", "many", "MORI_VIZ_EVENTS_PER_WARP='many' does not parse as int"),
        ("MORI_VIZ_EVENTS_PER_WARP", "-4", "is out of range: must be >= 1"),
    ],
)
def test_malformed_values_name_the_variable(monkeypatch, name, text, match):
    monkeypatch.setenv(name, text)
    with pytest.raises(ConfigError, match=match):
        setting(name)


def test_env_command_lists_every_variable(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "MORI_ENABLE_PROFILER=False" in out and "MORI_VIZ_EVENTS_PER_WARP=1024" in out


def test_include_dir_holds_the_headers():
    from pathlib import Path

    include = Path(mori.viz.get_include())
    assert (include / "mori_viz" / "trace.cuh").is_file() and (include / "mori_viz" / "layout.h").is_file()
